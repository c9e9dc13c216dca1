"""The pytest plugin (entry point ``pytest11: fairque``): fixtures for fairness tests.

Fixtures (nothing starts a server unless a test asks for a Redis-backed queue):

``fairque_server`` (session)
    Where the test queues live: the server of ``--fairque-url URL`` / ``$FAIRQUE_TEST_URL``
    (``--fairque-cluster`` / ``$FAIRQUE_TEST_CLUSTER=1`` for a Redis Cluster), else an embedded
    Valkey started for the session. A :class:`~fairque_testing.FairqueServer`.
``fairque_clock``
    The :class:`~fairque_testing.FakeClock` of the test's queues.
``fairque_make_queue``
    A factory: ``fairque_make_queue(config=None, *, memory=False)`` gives a new queue (its own
    name) on the server, or on the in-memory reference model with ``memory=True``, driven by
    ``fairque_clock``. Every queue it made is closed, and its keys deleted, after the test.
``fairque_queue``
    One queue on the server, from ``fairque_make_queue()``.
``fairque_memory_queue``
    One queue on the in-memory reference model (no server).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    # fairque itself is imported only when a fixture runs, so loading the plugin imports
    # nothing of the library under test (coverage tools measure it from the start).
    from fairque_core import FairQueue
    from fairque_core.settings.config import QueueConfig
    from fairque_testing.queues import FairqueServer, FakeClock

URL_ENV = "FAIRQUE_TEST_URL"
CLUSTER_ENV = "FAIRQUE_TEST_CLUSTER"

MakeQueue = Callable[..., "FairQueue"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fairque", "fairque fairness testing")
    group.addoption(
        "--fairque-url",
        default=None,
        metavar="URL",
        help=f"run fairque_* fixtures against this Redis/Valkey (default ${URL_ENV}, "
        "else an embedded Valkey); tests use fresh queue names and delete only their keys",
    )
    group.addoption(
        "--fairque-cluster",
        action="store_true",
        default=None,
        help=f"the --fairque-url server is a Redis Cluster (default ${CLUSTER_ENV})",
    )


def _configured(config: pytest.Config) -> tuple[str | None, bool]:
    url = config.getoption("--fairque-url") or os.environ.get(URL_ENV) or None
    cluster = config.getoption("--fairque-cluster")
    if cluster is None:
        cluster = os.environ.get(CLUSTER_ENV, "").strip().lower() in ("1", "true", "yes")
    return url, bool(cluster)


def pytest_report_header(config: pytest.Config) -> str | None:
    url, cluster = _configured(config)
    if url is None:
        return None
    return f"fairque: test queues on {url}" + (" (cluster)" if cluster else "")


@pytest.fixture(scope="session")
def fairque_server(pytestconfig: pytest.Config) -> Iterator[FairqueServer]:
    """The Redis/Valkey the test queues use (see the module docstring)."""
    from fairque_testing.queues import FairqueServer

    url, cluster = _configured(pytestconfig)
    if url is not None:
        yield FairqueServer(url, cluster=cluster, embedded=False)
        return
    from fairque_redis.servers.embedded import EmbeddedValkey, ServerBinaryNotFoundError

    try:
        server = EmbeddedValkey()
    except ServerBinaryNotFoundError as exc:
        pytest.skip(f"no embedded Valkey ({exc}); pass --fairque-url or set ${URL_ENV}")
    with server:
        yield FairqueServer(str(server.url), cluster=False, embedded=True)


@pytest.fixture
def fairque_clock() -> FakeClock:
    """The fake clock of this test's queues."""
    from fairque_testing.queues import FakeClock

    return FakeClock()


@pytest.fixture
def fairque_make_queue(
    request: pytest.FixtureRequest, fairque_clock: FakeClock
) -> Iterator[MakeQueue]:
    """A factory of fresh queues; all are closed (and their keys deleted) after the test."""
    from fairque_testing.queues import drop_queue, make_queue

    made: list[tuple[FairQueue, FairqueServer | None]] = []

    def factory(config: QueueConfig | None = None, *, memory: bool = False) -> FairQueue:
        server: FairqueServer | None = None
        if not memory:
            server = request.getfixturevalue("fairque_server")
        queue = make_queue(
            None if server is None else server.url,
            cluster=server is not None and server.cluster,
            config=config,
            clock=fairque_clock,
        )
        made.append((queue, server))
        return queue

    yield factory
    for queue, server in made:
        queue.close()
        if server is not None:
            drop_queue(server.url, queue.name, cluster=server.cluster)


@pytest.fixture
def fairque_queue(fairque_make_queue: MakeQueue) -> FairQueue:
    """A fresh queue on the test server (embedded Valkey or ``--fairque-url``)."""
    return fairque_make_queue()


@pytest.fixture
def fairque_memory_queue(fairque_make_queue: MakeQueue) -> FairQueue:
    """A fresh queue on the in-memory reference model."""
    return fairque_make_queue(memory=True)
