"""R7, torn AOF: a crash that also loses the tail of the append-only file (power-loss emulation).

A server with ``appendonly yes``, ``appendfsync always`` and ``aof-load-truncated yes`` takes a
load from one client thread: pushes over five tenants, and every third push a claim of two
tasks (leases held) and the finish of one of them. After every acknowledged call the size of
the incremental AOF file is noted (with ``always`` the command is in the file before the reply).
Then ``kill -9``. The AOF directory is restored once whole and then once per random cut, its
last incremental file truncated at a random offset in its second half, and the server restarted
on it each time (same port, same directory). For each load:

- the server loads (a torn tail is accepted, an incomplete MULTI/EXEC dropped whole);
- every task is in exactly the state it had after the last call whose AOF size is at or below
  the cut: nothing acknowledged before the cut is lost, nothing after it is half there;
- the invariant checker holds right after the load, and after the reaper (a far-future clock
  puts the leases of the dead client back) and after a drain, where every surviving task
  finishes and the counters add up.

Figures (printed): calls, bytes per push, the cut's distance from the end in bytes and calls,
acknowledged pushes lost per cut (the torn tail's share), load time. The whole file restored
loses nothing: that is ``kill -9`` with ``appendfsync always``.
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from fairque_core import Message, Priority, QueueConfig, TaskState
from fairque_redis.backends.backend import RedisBackend

from .invariants import check as check_invariants
from .servers import durable_server, incr_file, restore_aof, save_aof, wait_loaded

pytestmark = [pytest.mark.chaos, pytest.mark.redis]

TENANTS = 5


def _msg(task_id: str, n: int) -> Message:
    return Message(
        task_id=task_id,
        tenant=f"u{n % TENANTS}",
        priority=Priority.CRITICAL if n % 7 == 0 else Priority.NORMAL,
        body=b'{"n": %d}' % n,
    )


def _load(server: Any, queue: str, pushes: int) -> tuple[list[int], list[dict[str, str]]]:
    """Run the load; returns the AOF size after each call and the task states after it."""
    backend = RedisBackend.from_url(
        server.url, queue=queue, config=QueueConfig(name=queue, lease_seconds=60)
    )
    aof = incr_file(server)
    sizes: list[int] = []
    after: list[dict[str, str]] = []
    states: dict[str, str] = {}
    held: list[tuple[str, str]] = []

    def done() -> None:
        sizes.append(aof.stat().st_size)
        after.append(dict(states))

    try:
        for n in range(pushes):
            task_id = f"t{n:05d}"
            assert backend.push(_msg(task_id, n))
            states[task_id] = "queued"
            done()
            if n % 3 == 2:
                for claimed in backend.claim(worker_id="w", count=2):
                    states[claimed.message.task_id] = "started"
                    held.append((claimed.message.task_id, claimed.lease.token))
                done()
                task_id, token = held.pop(0)
                backend.finish(task_id, token, b'"ok"')
                states[task_id] = "finished"
                done()
    finally:
        backend.close()
    return sizes, after


def _verify_load(server: Any, queue: str, expected: dict[str, str], ids: list[str]) -> int:
    """After a restart: states, invariants, reaper, drain. Returns how many leases the reaper
    put back."""
    raw = redis.Redis.from_url(server.url)
    wait_loaded(raw)
    far = time.time() + 120.0  # every 60 s lease of the dead client has expired
    backend = RedisBackend(
        raw, queue=queue, config=QueueConfig(name=queue, lease_seconds=60), clock=lambda: far
    )
    try:
        pipe = raw.pipeline(transaction=False)
        for task_id in ids:
            pipe.hget(f"fq:{{{queue}}}:task:{task_id}", "st")
        found = {
            task_id: st.decode()
            for task_id, st in zip(ids, pipe.execute(), strict=True)
            if st is not None
        }
        assert found == expected, {
            i: (found.get(i), expected.get(i)) for i in ids if found.get(i) != expected.get(i)
        }
        assert check_invariants(raw, queue) == [], "invariants right after the load"
        reaped = backend.requeue_expired(10_000)
        assert reaped == sum(st == "started" for st in expected.values())
        assert check_invariants(raw, queue) == [], "invariants after the reaper"
        while claimed := backend.claim(worker_id="drain", count=100):
            backend.finish_batch([(c.message.task_id, c.lease.token, b'"ok"') for c in claimed])
        assert all(backend.get_state(i) is TaskState.FINISHED for i in expected)
        stats = backend.stats()
        assert stats["pushed"] == len(expected)
        assert stats["finished"] == len(expected)
        assert (stats["ready"], stats["leased"]) == (0, 0)
        assert check_invariants(raw, queue) == [], "invariants after the drain"
        return reaped
    finally:
        backend.close()
        raw.close()


def _scenario(kind: str, pushes: int, cuts: int, seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    queue = f"r7-{kind}"
    server = durable_server(kind)
    try:
        server.start()
        started = time.monotonic()
        sizes, after = _load(server, queue, pushes)
        elapsed = time.monotonic() - started
        server.kill()
        saved = tmp_path / f"aof-{kind}"
        save_aof(server, saved)
        total = incr_file(server).stat().st_size
        assert total == sizes[-1]
        ids = sorted(after[-1])
        cuts_at = sorted((rng.randrange(total // 2, total) for _ in range(cuts)), reverse=True)
        plan: list[int | None] = [None, *cuts_at]
        lost_per_cut: list[int] = []
        calls_cut: list[int] = []
        load_times: list[float] = []
        for cut in plan:
            restore_aof(server, saved, cut_at=cut)
            at = total if cut is None else cut
            last = max((k for k, size in enumerate(sizes) if size <= at), default=-1)
            expected = after[last] if last >= 0 else {}
            t0 = time.monotonic()
            server.start()
            raw = redis.Redis.from_url(server.url)
            wait_loaded(raw)
            raw.close()
            load_times.append(time.monotonic() - t0)
            _verify_load(server, queue, expected, ids)
            server.kill()
            lost = pushes - len(expected)
            if cut is None:
                assert lost == 0, "kill -9 with appendfsync always lost acknowledged pushes"
            else:
                lost_per_cut.append(lost)
                calls_cut.append(len(sizes) - 1 - last)
        cut_bytes = [total - c for c in plan if c is not None]
        print(
            f"R7 {kind}: {pushes} pushes, {len(sizes)} calls in {elapsed:.2f}s "
            f"({pushes / elapsed:.0f} pushes/s), AOF {total} B ({total / len(sizes):.0f} B/call); "
            f"whole file: loaded, 0 lost; {len(plan) - 1}/{len(plan) - 1} torn loads ok, "
            "invariants held after load, reaper and drain; "
            f"cut {min(cut_bytes)}-{max(cut_bytes)} B from the end "
            f"= {min(calls_cut)}-{max(calls_cut)} calls; acknowledged pushes lost "
            f"per cut: min {min(lost_per_cut)} median {statistics.median(lost_per_cut):.0f} "
            f"max {max(lost_per_cut)} (all after the cut); load {max(load_times):.2f}s max"
        )
    finally:
        server.stop()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["valkey", "redis7"])
def test_r7_torn_aof_short(kind: str, seed: int, tmp_path: Path) -> None:
    _scenario(kind, pushes=120, cuts=3, seed=seed, tmp_path=tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["valkey", "redis7"])
def test_r7_torn_aof_20_cuts(kind: str, seed: int, tmp_path: Path) -> None:
    _scenario(kind, pushes=1500, cuts=20, seed=seed, tmp_path=tmp_path)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["none", "everysec", "always"])
def test_durability_modes_under_kill_9(mode: str) -> None:
    """The durability modes of docs/delivery.md: acknowledged pushes that survive ``kill -9``
    of the server (no persistence: none; AOF everysec: all, the file is written before the
    reply and only the fsync waits; AOF always: all), and the push rate of each."""
    from fairque_redis.servers.embedded import EmbeddedValkey

    args = [] if mode == "none" else ["--appendfsync", mode]
    server = EmbeddedValkey(appendonly=mode != "none", extra_args=args)
    pushes = 400
    with server:
        backend = RedisBackend.from_url(server.url, queue="modes")
        try:
            started = time.monotonic()
            for n in range(pushes):
                assert backend.push(_msg(f"t{n}", n))
            rate = pushes / (time.monotonic() - started)
            server.kill()
            server.start()
            raw = redis.Redis.from_url(server.url)
            wait_loaded(raw)
            kept = sum(1 for _ in raw.scan_iter(match="fq:{modes}:task:*", count=1000))
            raw.close()
        finally:
            backend.close()
    print(f"durability {mode}: {rate:.0f} pushes/s one by one; {kept}/{pushes} survive kill -9")
    assert kept == (0 if mode == "none" else pushes)
