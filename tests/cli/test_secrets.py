"""Issue 16, defect 5: a password never shows, wherever a URL or a config is shown.

One canary secret is set as an ACL user's password and handed over in each form a user may
write (``redis://user:PW@host``, ``?password=PW``, ``redis.password``); every output path is
then searched for it: reprs, exception messages, log records, the demo's and the CLI's
output (stats, worker banner, a bad ``--url``). Metric and span attributes are built from task
fields and the queue name only (no URL reaches them), so they cannot carry it.
"""

from __future__ import annotations

import io
import logging
import socket
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from fairque_core import (
    ConfigurationError,
    FairQueueConfig,
    RedisConfig,
    RedisConnectionError,
    Task,
)
from fairque_core.settings.config import mask_url
from fairque_redis import connect
from fairque_redis.backends.backend import RedisBackend

from .conftest import run_cli_here

CANARY = "fq-canary-7f3a9c"
USER = "fq-canary-user"

pytestmark = pytest.mark.redis


@pytest.fixture
def secret_urls(valkey_server: Any) -> Iterator[dict[str, str]]:
    """URLs of the session Valkey that log in as a user whose password is the canary."""
    admin = redis.Redis.from_url(valkey_server.url)
    admin.execute_command("ACL", "SETUSER", USER, "on", f">{CANARY}", "~*", "&*", "+@all")
    host, port = valkey_server.url.removeprefix("redis://").split("/")[0].split(":")
    try:
        yield {
            "userinfo": f"redis://{USER}:{CANARY}@{host}:{port}/0",
            "query": f"redis://{host}:{port}/0?username={USER}&password={CANARY}",
        }
    finally:
        admin.execute_command("ACL", "DELUSER", USER)
        admin.close()


def test_mask_url_hides_userinfo_and_query_secrets() -> None:
    cases = {
        f"redis://u:{CANARY}@h:1/0": "redis://u:***@h:1/0",
        f"redis://:{CANARY}@h": "redis://:***@h",
        f"rediss://h/0?password={CANARY}&db=1": "rediss://h/0?password=***&db=1",
        f"redis://h/0?ssl=1&PassWord={CANARY}": "redis://h/0?ssl=1&PassWord=***",
        "redis://h:1/0": "redis://h:1/0",
    }
    for url, masked in cases.items():
        assert mask_url(url) == masked
    assert CANARY not in mask_url(f"redis://h:notaport/?password={CANARY}")
    assert CANARY not in mask_url(f"redis://[{CANARY}")


def test_reprs_and_config_errors(secret_urls: dict[str, str]) -> None:
    for url in secret_urls.values():
        config = RedisConfig(url=url)
        assert CANARY not in repr(config)
        assert CANARY not in repr(FairQueueConfig(redis=config))
        with pytest.raises(ConfigurationError) as info:
            RedisConfig(url=url, port=0)
        assert CANARY not in str(info.value) + repr(info.value.__dict__)
    assert CANARY not in repr(RedisConfig(password=CANARY))


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_connections_exceptions_and_logs(
    secret_urls: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []
    with caplog.at_level(logging.DEBUG):
        for url in secret_urls.values():
            with connect(url, queue="canary") as queue:
                seen += [repr(queue), repr(queue.backend)]
                queue.push(Task.create("alice", task_id="t1"))
            dead = url.replace(url.split("@")[-1].split("/")[0], f"127.0.0.1:{_closed_port()}")
            if "@" not in url:
                dead = f"redis://127.0.0.1:{_closed_port()}/0?password={CANARY}"
            with pytest.raises(RedisConnectionError) as info:
                connect(dead, queue="canary")
            seen += [str(info.value), repr(info.value)]
            backend = RedisBackend.from_url(dead, queue="canary")
            assert backend.push_batch([]) == []  # no I/O
            with pytest.raises(RedisConnectionError) as later:
                backend.stats()
            seen += [str(later.value), repr(backend)]
            backend.close()
    seen += [record.getMessage() for record in caplog.records]
    assert not [text for text in seen if CANARY in text]


def test_demo_prints_the_url_masked(secret_urls: dict[str, str]) -> None:
    from fairque_cli.demo import DemoOptions, run_demo

    out = io.StringIO()
    run_demo(DemoOptions(duration=2.0, url=secret_urls["userinfo"], tenants=3), out)
    text = out.getvalue()
    assert "server: redis://fq-canary-user:***@" in text
    assert CANARY not in text


HANDLERS = """
from fairque_core import TaskRegistry
registry = TaskRegistry()

@registry.task("noop")
def noop(payload):
    return None
"""


def test_cli_output_never_shows_it(
    secret_urls: dict[str, str], queue_name: str, tmp_path: Path
) -> None:
    (tmp_path / "canaryhandlers.py").write_text(textwrap.dedent(HANDLERS), encoding="utf-8")
    outputs: list[str] = []
    for url in secret_urls.values():
        base = ["--url", url, "--queue", queue_name]
        for args in (["stats"], ["stats", "--json"]):
            proc = run_cli_here([*base, *args])
            assert proc.returncode == 0, proc.stderr
            outputs += [proc.stdout, proc.stderr]
        worker = run_cli_here(
            [*base, "worker", "--handler", "canaryhandlers:registry", "--burst"], cwd=tmp_path
        )
        assert worker.returncode == 0, worker.stderr
        assert queue_name in worker.stderr  # the banner was printed
        outputs += [worker.stdout, worker.stderr]
        env = {"FAIRQUE_REDIS_URL": url, "FAIRQUE_DEBUG": "1"}
        proc = run_cli_here(["--queue", queue_name, "stats"], env=env)
        outputs += [proc.stdout, proc.stderr]
    bad = run_cli_here(["--url", f"http://u:{CANARY}@h/0", "stats"])
    assert bad.returncode != 0
    outputs += [bad.stdout, bad.stderr]
    assert not [text for text in outputs if CANARY in text]
