"""Queues for tests: a fake clock, fresh queue names, and cleanup on the server.

:func:`make_queue` builds a :class:`~fairque_core.FairQueue` on a Redis/Valkey URL (or on the
in-memory reference model with ``url=None``), driven by a :class:`FakeClock`, under a queue name
no other test uses. :func:`clock_of` finds that clock again, which is how
:func:`fairque_testing.simulate` moves time forward for delayed tasks without sleeping.
:func:`drop_queue` deletes every key of a queue (only that queue's keys: the prefix
``fq:{<queue>}:`` is the whole key space of one queue), so tests can run on a shared server.
"""

from __future__ import annotations

import threading
import time
import uuid
import weakref
from typing import Any

import attrs

from fairque_core import FairQueue
from fairque_core.memory.model import InMemoryBackend
from fairque_core.settings.config import QueueConfig

__all__ = [
    "FairqueServer",
    "FakeClock",
    "clock_of",
    "drop_queue",
    "make_queue",
    "new_queue_name",
]


class FakeClock:
    """A clock moved by hand (epoch seconds); starts at a whole second near real time.

    Pass it as ``clock=`` to a backend: the in-memory model reads it directly, and the Redis
    backend sends its time to the scripts instead of the server's ``TIME`` (tests only).
    """

    def __init__(self, start: float | None = None) -> None:
        self.now = float(int(time.time())) if start is None else float(start)
        self._lock = threading.Lock()  # threads of one test may move it

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move the clock ``seconds`` forward (never back) and return the new time."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back (advance({seconds!r}))")
        with self._lock:
            self.now += seconds
            return self.now

    def __repr__(self) -> str:
        return f"FakeClock({self.now!r})"


@attrs.frozen
class FairqueServer:
    """Where the test queues live: ``url`` (None for none), cluster mode, and who started it."""

    url: str
    cluster: bool = False
    embedded: bool = False


_CLOCKS: weakref.WeakKeyDictionary[FairQueue, FakeClock] = weakref.WeakKeyDictionary()


def clock_of(queue: FairQueue) -> FakeClock | None:
    """The fake clock :func:`make_queue` gave ``queue`` (None for a queue on real time)."""
    return _CLOCKS.get(queue)


def new_queue_name(prefix: str = "fqtest") -> str:
    """A queue name no other test uses (letters, digits and one dash)."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def make_queue(
    url: str | None = None,
    *,
    cluster: bool = False,
    config: QueueConfig | None = None,
    clock: FakeClock | None = None,
    name: str | None = None,
    plugins: tuple[object, ...] = (),
) -> FairQueue:
    """A fresh queue under a new name, driven by a fake clock.

    ``url=None`` gives the in-memory reference model; any other URL the Redis adapter
    (``cluster=True`` for a Redis Cluster). ``config`` is used with its name replaced by the new
    one (tenant weights and tiers in it are applied). Close the queue and call
    :func:`drop_queue` when done (the pytest fixtures do both).
    """
    clock = clock if clock is not None else FakeClock()
    queue_name = name if name is not None else new_queue_name()
    cfg = attrs.evolve(config or QueueConfig(), name=queue_name)
    backend: Any
    if url is None:
        backend = InMemoryBackend(clock, queue=queue_name, config=cfg)
    else:
        from fairque_redis.backends.backend import RedisBackend

        backend = RedisBackend.from_url(
            url, queue=queue_name, cluster=cluster, config=cfg, clock=clock
        )
    queue = FairQueue(backend, plugins=plugins, config=cfg)
    try:
        queue.apply_tenant_config()
    except BaseException:
        queue.close()
        raise
    _CLOCKS[queue] = clock
    return queue


def drop_queue(url: str, queue_name: str, *, cluster: bool = False) -> int:
    """Delete every key of queue ``queue_name`` on the server at ``url``; returns how many.

    All keys of one queue share the prefix ``fq:{<queue>}:`` (one hash slot on a cluster),
    so nothing outside that queue is touched.
    """
    from fairque_redis.keys import KeySpace

    prefix = KeySpace(queue_name).prefix
    pattern = prefix + "*"  # a queue name has no glob characters (validated)
    client: Any
    if cluster:
        from redis.cluster import RedisCluster

        client = RedisCluster.from_url(url)
        node = client.get_node_from_key(prefix)
        keys = list(client.scan_iter(match=pattern, count=1000, target_nodes=node))
    else:
        import redis

        client = redis.Redis.from_url(url)
        keys = list(client.scan_iter(match=pattern, count=1000))
    try:
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])  # one hash slot, even on a cluster
        return len(keys)
    finally:
        client.close()
