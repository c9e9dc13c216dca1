"""The plain push accelerator (ADR 80, switch ``plain_push``) on against off, and against huey.

    uv run --no-sync --with huey==3.5.4 python bench/bench_plain_push.py [--rounds R]
        [--count N] [--blocks B] [--tenants T]

One embedded Valkey, one process. Two queues of ``T`` (default 100) tenants that each already
hold ready work (a warm-up push each, so every timed push is the common one: an active tenant,
no limits, no unique key, no dependency): one queue's backend built with every accelerator on,
the other's with ``plain_push`` off (``push.lua`` for every push). Each round runs ``B`` blocks
of ``N`` one-by-one pushes of each side, the sides' order rotating from block to block, so that
the sides run in the same few seconds of a shared machine's load (``--idle``: every push goes to
a new tenant instead, which it activates: the push of an idle queue; the ``floor`` side still
runs the common case's commands):

- ``on`` / ``off``: ``FairQueue.push(Task.create(f"tenant-{i % T}", payload={"t": ...}))``, as
  ``bench/peers/fairque_peer.py`` pushes in ``compare.py``'s ``enqueue_one``;
- ``huey``: ``noop(i, time.time())`` on a ``RedisHuey`` (one ``LPUSH`` per call; skipped when
  huey is not installed: run with ``--with huey==3.5.4`` as above);
- ``floor``: the floor of a push that keeps push.lua's checks and writes: the same client path
  (``Task.create``, the engine's message, the plain call's arguments) sent by redis-py to a
  function that runs the 12 commands of ``push_plain.lua``'s common case on a queue of its own
  with constant Lua around them (no checks of the replies, no numbering, no formatting);
- ``rpush``: ``RPUSH`` of a 150-byte entry through redis-py, the round trip any push pays.

Per side it prints the wall µs per push, the server's time per push inside the script calls
(INFO commandstats: FCALL and EVALSHA ``usec``, inner commands included), the commands per push
(every command the server counted during the side's blocks, the script call itself included),
the server's CPU per push (INFO cpu, user + sys: socket and event loop included, the figure of
``compare.py``'s server rows), and the medians of the per-round ratios: on/off server time and
CPU, and the rate of each fairque side over huey's. Read the ratios: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import redis

from fairque_core import FairQueue, Task
from fairque_core.app.engine.messages import to_message
from fairque_core.settings.accel import Accelerators
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.servers.embedded import EmbeddedValkey

SCRIPT_CALLS = ("cmdstat_fcall", "cmdstat_evalsha")
# the 12 commands of push_plain.lua's common case, nothing else (the ``floor`` side)
FLOOR = r"""#!lua name=fq_bench_plain_floor
local C
redis.register_function('fq_bench_plain_floor', function(KEYS, ARGV)
  C = redis.call
  local p = string.sub(KEYS[1], 1, #KEYS[1] - 4)
  local id, u = ARGV[9], ARGV[10]
  local t = C('TIME')
  C('ZINTERCARD', 7, KEYS[3], KEYS[4], KEYS[5], KEYS[6], p .. 'tenants', p .. 'parked',
    p .. 'active:0', 'LIMIT', 1)
  C('HMGET', KEYS[1], 'vtime', 'seq', 'ready', 'act', 'lim')
  C('LLEN', p .. 'wake')
  C('HMGET', p .. 'task:' .. id, 'st', 'exp', 'u')
  C('ZCARD', p .. 'n:' .. u)
  C('HLEN', p .. 'tenant:' .. u)
  C('HINCRBY', KEYS[2], 'pushed', 1)
  C('HSET', p .. 'task:' .. id, 'u', u, 'p', ARGV[11], 'b', ARGV[14], 'm', ARGV[13], 'rc', '0',
    'seq', '1', 'st', 'queued', 'rd', t[1], 'due', t[1], 'dms', ARGV[12], 'rec', '0')
  C('ZADD', p .. 'n:' .. u, t[1], '0000000000000001' .. id)
  C('HINCRBY', p .. 'ts:' .. u, 'pushed', 1)
  C('HSET', KEYS[1], 'seq', '1', 'ready', '1')
  return {1}
end)
-- the least write of a record: its hash, the queue member, meta's sequence (no check, no count)
redis.register_function('fq_bench_plain_writes', function(KEYS, ARGV)
  C = redis.call
  local p = string.sub(KEYS[1], 1, #KEYS[1] - 4)
  local id, u = ARGV[9], ARGV[10]
  C('HSET', p .. 'task:' .. id, 'u', u, 'p', ARGV[11], 'b', ARGV[14], 'm', ARGV[13], 'rc', '0',
    'seq', '1', 'st', 'queued', 'rd', '1', 'due', '1', 'dms', ARGV[12], 'rec', '0')
  C('ZADD', p .. 'n:' .. u, 1, '0000000000000001' .. id)
  C('HSET', KEYS[1], 'seq', '1')
  return {1}
end)
"""


def _stats(client: redis.Redis) -> tuple[int, int, float]:
    """(commands, script µs, server CPU s) so far."""
    stats = client.info("commandstats")
    commands = sum(int(v["calls"]) for v in stats.values())
    script_us = sum(int(stats[k]["usec"]) for k in SCRIPT_CALLS if k in stats)
    cpu = client.info("cpu")
    return commands, script_us, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (medians printed)")
    parser.add_argument("--count", type=int, default=500, help="pushes per block")
    parser.add_argument("--blocks", type=int, default=4, help="blocks per side and round")
    parser.add_argument("--tenants", type=int, default=100, help="tenants, each with ready work")
    parser.add_argument(
        "--idle",
        action="store_true",
        help="every push to a tenant of its own, new (so activated): the idle queue's push",
    )
    opts = parser.parse_args()
    tenants = opts.tenants
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.2f}")
    with EmbeddedValkey() as server:
        client = redis.Redis.from_url(server.url)
        queues = {
            "on": FairQueue(RedisBackend.from_url(server.url, queue="on", accel=Accelerators())),
            "off": FairQueue(
                RedisBackend.from_url(
                    server.url, queue="off", accel=Accelerators(off={"plain_push"})
                )
            ),
        }

        serial = iter(range(10**9))

        def tenant(i: int) -> str:
            return f"idle-{next(serial)}" if opts.idle else f"tenant-{i % tenants}"

        def fairque(queue: FairQueue) -> Callable[[int], Any]:
            return lambda i: queue.push(Task.create(tenant(i), payload={"t": time.time()}))

        sides: dict[str, Callable[[int], Any]] = {name: fairque(q) for name, q in queues.items()}
        client.function_load(FLOOR, replace=True)
        floor = FairQueue(RedisBackend.from_url(server.url, queue="floor"))
        planner, anchors = floor._backend._planner, floor._backend._planner.anchors

        def floor_push(i: int) -> Any:
            task = Task.create(tenant(i), payload={"t": time.time()})
            call = planner.plain([to_message(task, floor._plugins, floor._config)])
            assert call is not None
            return client.fcall("fq_bench_plain_floor", len(anchors), *anchors, *call.args)

        sides["floor"] = floor_push
        entry = b"e" * 150
        sides["rpush"] = lambda i: client.execute_command("RPUSH", "bench-rpush", entry)
        try:
            from huey import RedisHuey
        except ImportError:
            print("huey is not installed: run with `uv run --no-sync --with huey==3.5.4`")
        else:
            huey = RedisHuey("plainbench", url=server.url)

            @huey.task()  # type: ignore[misc]
            def noop(i: int, pushed_at: float) -> None:
                return None

            sides["huey"] = lambda i: noop(i, time.time())
        for push in sides.values():  # warm-up: scripts loaded, every tenant active
            for i in range(max(tenants, 200)):
                push(i)
        rounds: list[dict[str, dict[str, float]]] = []
        names = list(sides)
        for _ in range(opts.rounds):
            got = {name: {"s": 0.0, "cmds": 0.0, "us": 0.0, "cpu": 0.0} for name in names}
            for b in range(opts.blocks):
                for name in names[b % len(names) :] + names[: b % len(names)]:
                    push = sides[name]
                    c0, u0, p0 = _stats(client)
                    t0 = time.perf_counter()
                    for i in range(opts.count):
                        push(i)
                    spent = time.perf_counter() - t0
                    c1, u1, p1 = _stats(client)
                    row = got[name]
                    row["s"] += spent
                    row["cmds"] += c1 - c0 - 2  # the two INFO calls of _stats
                    row["us"] += u1 - u0
                    row["cpu"] += p1 - p0
            n = opts.count * opts.blocks
            rounds.append({name: {k: v / n for k, v in row.items()} for name, row in got.items()})
    print(
        f"{opts.rounds} rounds of {opts.blocks} blocks of {opts.count} one-by-one pushes per "
        f"side, {tenants} active tenants; medians"
    )
    print(f"{'side':6} {'us/push':>8} {'cmds/push':>9} {'script us':>9} {'cpu us':>7}")
    for name in names:
        med = {k: statistics.median(r[name][k] for r in rounds) for k in rounds[0][name]}
        print(
            f"{name:6} {med['s'] * 1e6:8.1f} {med['cmds']:9.2f} {med['us']:9.1f} "
            f"{med['cpu'] * 1e6:7.1f}"
        )

    def ratio(f: Callable[[dict[str, dict[str, float]]], float]) -> str:
        return f"x{statistics.median(f(r) for r in rounds):.3f}"

    print("medians of the per-round ratios:")
    print(f"  script us on/off {ratio(lambda r: r['on']['us'] / r['off']['us'])}")
    print(f"  server cpu on/off {ratio(lambda r: r['on']['cpu'] / r['off']['cpu'])}")
    print(f"  rate on/off {ratio(lambda r: r['off']['s'] / r['on']['s'])}")
    print(f"  script us floor/off {ratio(lambda r: r['floor']['us'] / r['off']['us'])}")
    if "huey" in names:
        for name in ("on", "off", "floor", "rpush"):
            print(f"  rate {name}/huey {ratio(lambda r, n=name: r['huey']['s'] / r[n]['s'])}")
    print(f"load at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
