"""The fault proxy on its own: each mode does what it says, and ADR 11's experiment E4 (a
swallowed EVALSHA reply) gives a typed error with fairque's client and a silent double run with
redis-py's default retries."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from fairque_core import Message, OutcomeUnknownError, Priority, RedisConnectionError
from fairque_redis.backends.backend import RedisBackend

from .faultproxy import FaultProxy, evalsha_of

pytestmark = [pytest.mark.chaos, pytest.mark.redis, pytest.mark.timeout(60)]


def _msg(task_id: str) -> Message:
    return Message(task_id=task_id, tenant="u", priority=Priority.NORMAL, body=b"{}")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def proxy(valkey_server: Any) -> Iterator[FaultProxy]:
    with FaultProxy(valkey_server.url) as running:
        yield running
        assert running.errors == []


def _rtt(client: Any) -> float:
    started = time.perf_counter()
    assert client.ping()
    return time.perf_counter() - started


def test_pass_and_delay(proxy: FaultProxy) -> None:
    client = redis.Redis.from_url(proxy.url, socket_timeout=2)
    try:
        client.set("fp:k", b"v" * 100_000)  # larger than one read: forwarded in pieces
        assert client.get("fp:k") == b"v" * 100_000
        assert _rtt(client) < 0.1
        proxy.delay(150)
        assert proxy.mode == "delay"
        slow = _rtt(client)
        assert 0.15 <= slow < 0.6
        proxy.pass_through()
        assert _rtt(client) < 0.1
    finally:
        client.delete("fp:k")
        client.close()


def test_blackhole_times_out_and_loses_the_request(proxy: FaultProxy, raw: Any) -> None:
    backend = RedisBackend.from_url(proxy.url, queue="fp-blackhole", socket_timeout=0.5)
    try:
        assert backend.push(_msg("before")) is True
        proxy.blackhole()
        started = time.monotonic()
        with pytest.raises(OutcomeUnknownError):  # sent, then no answer within the timeout
            backend.push(_msg("lost"))
        assert 0.45 <= time.monotonic() - started < 1.5
        with pytest.raises(RedisConnectionError):  # a new connection never gets its handshake
            backend.push(_msg("lost"))
        proxy.pass_through()
        assert backend.get_state("lost") is None  # the blackhole forwarded nothing
        assert backend.push(_msg("after")) is True
    finally:
        backend.close()
        for key in raw.scan_iter(match="fq:{fp-blackhole}:*"):
            raw.delete(key)


def test_reset_mode_and_one_shot_resets(proxy: FaultProxy) -> None:
    client = redis.Redis.from_url(proxy.url, socket_timeout=2)
    blocking = redis.Redis.from_url(proxy.url, socket_timeout=5)
    try:
        assert client.ping()
        result: list[BaseException] = []

        def blpop() -> None:
            try:
                blocking.blpop(["fp:never"], timeout=3)
            except redis.ConnectionError as exc:
                result.append(exc)

        waiter = threading.Thread(target=blpop)
        waiter.start()
        deadline = time.monotonic() + 2
        while proxy.open_connections < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proxy.reset_connections() == 2
        waiter.join(5)
        assert result, "a command in flight must fail when its connection is reset"
        assert client.ping()  # an idle pooled connection is replaced transparently
        proxy.reset()
        with pytest.raises(redis.ConnectionError):
            client.ping()
        assert proxy.resets >= 3
        proxy.pass_through()
        assert client.ping()
    finally:
        client.close()
        blocking.close()


def test_swallowed_pipeline_reply_is_paired_with_its_command(proxy: FaultProxy, raw: Any) -> None:
    client = redis.Redis.from_url(proxy.url, socket_timeout=2)
    raw.delete("fp:n")
    try:
        proxy.swallow_reply_if(lambda cmd: cmd[0].upper() == b"INCRBY", limit=1)
        pipe = client.pipeline(transaction=False)
        pipe.set("fp:a", 1).incr("fp:n").get("fp:a")
        with pytest.raises(redis.ConnectionError):
            pipe.execute()
        assert raw.get("fp:n") == b"1"  # the server ran it: only the reply was lost
        [gone] = proxy.swallowed
        assert gone.command == [b"INCRBY", b"fp:n", b"1"]  # redis-py sends INCR as INCRBY
        assert gone.reply == 1
        assert client.incr("fp:n") == 2  # limit=1: the next one passes
    finally:
        raw.delete("fp:a", "fp:n")
        client.close()


def _push_call(backend: RedisBackend) -> Any:
    """A predicate matching a push's script call: push.lua's, or the plain push's (ADR 80)."""
    preds = [evalsha_of(s.sha, s.function) for s in map(backend._scripts.get, PUSHES) if s]
    return lambda command: any(pred(command) for pred in preds)


PUSHES = ("push", "push_plain")


def test_e4_fairque_client_raises_outcome_unknown(proxy: FaultProxy, raw: Any) -> None:
    backend = RedisBackend.from_url(proxy.url, queue="fp-e4")
    try:
        assert backend.push(_msg("warm")) is True
        proxy.swallow_reply_if(_push_call(backend), limit=1)
        with pytest.raises(OutcomeUnknownError):
            backend.push(_msg("t1"))
        assert len(proxy.swallowed) == 1
        stats = backend.stats()
        assert (stats["pushed"], stats["duplicates"]) == (2, 0)  # ran once, not retried
        assert backend.push(_msg("t1")) is False  # retrying by id is safe
    finally:
        backend.close()
        for key in raw.scan_iter(match="fq:{fp-e4}:*"):
            raw.delete(key)


def test_e4_redis_py_default_retry_runs_the_script_twice(proxy: FaultProxy, raw: Any) -> None:
    """ADR 11: a client handed in is used as is. redis-py's own default (``Redis(host=...)``:
    10 retries) re-sends the call on a new connection; push's dedupe makes that harmless, but
    the caller sees a plain success."""
    client = redis.Redis(host="127.0.0.1", port=proxy.port)
    backend = RedisBackend(client, queue="fp-e4-retry")
    try:
        assert backend.push(_msg("warm")) is True
        proxy.swallow_reply_if(_push_call(backend), limit=1)
        assert backend.push(_msg("t1")) is False  # the retry found the first run's task
        assert len(proxy.swallowed) == 1
        stats = backend.stats()
        assert (stats["pushed"], stats["duplicates"]) == (2, 1)  # the script ran twice
    finally:
        client.close()
        for key in raw.scan_iter(match="fq:{fp-e4-retry}:*"):
            raw.delete(key)


def test_close_leaves_no_thread_or_socket(valkey_server: Any) -> None:
    threads, fds = threading.active_count(), _open_fds()
    proxy = FaultProxy(valkey_server.url).start()
    clients = [redis.Redis.from_url(proxy.url) for _ in range(3)]
    for client in clients:
        assert client.ping()
    proxy.delay(50)
    assert threading.active_count() == threads + 1
    proxy.close()
    proxy.close()  # idempotent
    for client in clients:
        client.close()
    assert threading.active_count() == threads
    assert _open_fds() == fds
    with pytest.raises(RuntimeError):
        proxy.pass_through()
