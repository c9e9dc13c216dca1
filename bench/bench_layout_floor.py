"""What a claim and a finish cost the server at least, per storage layout (issue 17; ADR 49).

    uv run --no-sync python bench/bench_layout_floor.py [--batch N] [--calls C]
        [--rounds R] [--drain N] [--push] [--skip-callgrind] [--skip-drain]

Issue 17 asks for <= 25 µs of server CPU per drained task. fairque's claim and finish cost
~70-85 µs here. This bench asks how much of that any script on the same layout would pay,
by running the *least* claim and finish each layout allows, as a small Redis function library
(``fq_floor``) beside fairque's own scripts:

- ``record``: fairque's layout, one hash per task. The claim pops ``N`` ids (one ZPOPMIN), and
  per task writes the lease into the record (HSET of state, token, worker, deadline) and reads
  what the worker needs (HMGET of body, meta, retries); one ZADD of the leases. The finish reads
  state and token per task (HMGET), writes the finished record (HSET) and its expiry (PEXPIRE);
  one ZREM of the leases. No fairness, no counters, no checks of damaged keys.
- ``packed``: one hash per queue holding every task's record packed (cmsgpack): the records in
  one HMGET and one HSET per call, unpacked, changed and packed in Lua; the finished records'
  expiry by field (HPEXPIRE, Valkey 9 / Redis 7.4).
- ``location``: a task's state is where its id is (no state written per task): the bodies in
  one hash; the claim is ZPOPMIN, one HMGET of the bodies, one ZADD of ``id|token`` leases; the
  finish one ZREM of the leases, one HDEL of the bodies and a counter. No finished record, so
  no result, no ``get`` of a finished task.
- ``list``: one LPOP of ``N`` (huey's kind of queue: no lease, nothing to finish).
- ``fairque``: this tree's claim and finish scripts (``bench_claim_finish_ir.measure``), with 1
  and with 100 tenants.

Two measures:

1. **Instructions** per task inside FCALL, counted under callgrind (load-independent; the
   machinery of ``_callgrind.py``): ``C`` calls of ``N`` (default 6 x 50).
2. **Server CPU per task of a drain** (``--drain`` tasks, default 20,000; the issue's measure):
   one client claims ``N`` and finishes them, call after call, against an embedded Valkey, and
   the server's ``used_cpu_sys + used_cpu_user`` (INFO cpu) over the drain is divided by the
   tasks: Lua, commands, the socket and the event loop together. The layouts take turns, the
   order flipping each round; medians of ``R`` rounds (default 3). The client's own time is
   not in the figure.

``--push`` measures one-message pushes the same two ways instead (200 counted, and the server
CPU per push of ``--drain`` pushes one after another): the least push of each layout refuses a
known id (``record``: EXISTS, then HSET of the record; ``packed`` and ``location``: HSETNX),
adds the id to the ready set and counts it; the list is a plain LPUSH (no script, no
duplicate check); ``fairque`` is ``RedisBackend.push`` of one ready NORMAL message into a
queue whose 100 tenants are all active.

The gap between ``record`` and ``fairque`` is what fairque's features cost on top of its layout
(fair choice among tenants, counters, limits, repairs); the gap between the layouts is what a
change of layout could save. Figures and what follows from them: ADR 49, docs/benchmarks-history.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from functools import partial

import msgpack
import redis
from _callgrind import GC_FUNCTION, GC_LIBRARY, callgrind_server
from bench_claim_finish_ir import measure as measure_fairque
from bench_claim_finish_ir import measure_push as measure_fairque_push

from fairque_core import Message, Priority
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.scripting.function_library import LIBRARY

LAYOUTS = ("record", "packed", "location", "list")
BODY = b'{"n": 1}'
META = b'["application/json",3,0.0,0.0,[],{},""]'
LEASE_MS = 30_000

# the least claim and finish of each layout: keys are fixed names in one hash tag, {f}; ARGV of
# a claim: N, now ms, then N tokens; of a finish: the ids (record, packed) or id|token members
FLOOR_LIBRARY = r"""#!lua name=fq_floor
local function record_claim(keys, argv)
  local n, dl = tonumber(argv[1]), tostring(tonumber(argv[2]) + 30000)
  local got = redis.call('ZPOPMIN', '{f}:ready', n)
  local out, leases = {}, {}
  for k = 1, #got, 2 do
    local id = got[k]
    local key = '{f}:t:' .. id
    redis.call('HSET', key, 'st', 'started', 'tok', argv[2 + (k + 1) / 2], 'wk', 'w', 'dl', dl)
    local v = redis.call('HMGET', key, 'b', 'm', 'rc')
    leases[#leases + 1] = dl
    leases[#leases + 1] = id
    out[#out + 1] = id
    out[#out + 1] = v[1]
    out[#out + 1] = v[2]
    out[#out + 1] = v[3]
  end
  if #leases > 0 then redis.call('ZADD', '{f}:leases', unpack(leases)) end
  return out
end
local function record_finish(keys, argv)
  local done = {}
  for k = 1, #argv do
    local key = '{f}:t:' .. argv[k]
    local v = redis.call('HMGET', key, 'st', 'tok')
    if v[1] == 'started' then
      redis.call('HSET', key, 'st', 'finished', 'exp', '0', 'b', '', 'm', '')
      redis.call('PEXPIRE', key, 3600000)
      done[#done + 1] = argv[k]
    end
  end
  if #done > 0 then redis.call('ZREM', '{f}:leases', unpack(done)) end
  return #done
end
local function packed_claim(keys, argv)
  local n, dl = tonumber(argv[1]), tostring(tonumber(argv[2]) + 30000)
  local got = redis.call('ZPOPMIN', '{f}:ready', n)
  local ids = {}
  for k = 1, #got, 2 do ids[#ids + 1] = got[k] end
  if #ids == 0 then return {} end
  local recs = redis.call('HMGET', '{f}:recs', unpack(ids))
  local sets, leases, out = {}, {}, {}
  for k = 1, #ids do
    local r = cmsgpack.unpack(recs[k])
    r[1], r[2], r[3], r[4] = 'started', argv[2 + k], 'w', dl
    sets[#sets + 1] = ids[k]
    sets[#sets + 1] = cmsgpack.pack(r)
    leases[#leases + 1] = dl
    leases[#leases + 1] = ids[k]
    out[#out + 1] = ids[k]
    out[#out + 1] = r[5]
    out[#out + 1] = r[6]
  end
  redis.call('HSET', '{f}:recs', unpack(sets))
  redis.call('ZADD', '{f}:leases', unpack(leases))
  return out
end
local function packed_finish(keys, argv)
  local recs = redis.call('HMGET', '{f}:recs', unpack(argv))
  local sets, done = {}, {}
  for k = 1, #argv do
    local r = cmsgpack.unpack(recs[k])
    if r[1] == 'started' then
      r[1], r[5], r[6] = 'finished', '', ''
      sets[#sets + 1] = argv[k]
      sets[#sets + 1] = cmsgpack.pack(r)
      done[#done + 1] = argv[k]
    end
  end
  if #done == 0 then return 0 end
  redis.call('HSET', '{f}:recs', unpack(sets))
  redis.call('HPEXPIRE', '{f}:recs', 3600000, 'FIELDS', #done, unpack(done))
  redis.call('ZREM', '{f}:leases', unpack(done))
  return #done
end
local function location_claim(keys, argv)
  local n, dl = tonumber(argv[1]), tostring(tonumber(argv[2]) + 30000)
  local got = redis.call('ZPOPMIN', '{f}:ready', n)
  local ids, leases = {}, {}
  for k = 1, #got, 2 do
    local id = got[k]
    ids[#ids + 1] = id
    leases[#leases + 1] = dl
    leases[#leases + 1] = id .. '|' .. argv[2 + (k + 1) / 2]
  end
  if #ids == 0 then return {{}, {}} end
  local bodies = redis.call('HMGET', '{f}:bodies', unpack(ids))
  redis.call('ZADD', '{f}:leases', unpack(leases))
  return {ids, bodies}
end
local function location_finish(keys, argv)
  local gone = redis.call('ZREM', '{f}:leases', unpack(argv))
  local ids = {}
  for k = 1, #argv do ids[k] = string.match(argv[k], '^[^|]*') end
  redis.call('HDEL', '{f}:bodies', unpack(ids))
  redis.call('HINCRBY', '{f}:stats', 'finished', gone)
  return gone
end
local function list_claim(keys, argv)
  return redis.call('LPOP', '{f}:list', tonumber(argv[1]))
end
redis.register_function('floor_record_claim', record_claim)
redis.register_function('floor_record_finish', record_finish)
redis.register_function('floor_packed_claim', packed_claim)
redis.register_function('floor_packed_finish', packed_finish)
redis.register_function('floor_location_claim', location_claim)
redis.register_function('floor_location_finish', location_finish)
redis.register_function('floor_list_claim', list_claim)
-- one push (ARGV: id, tenant, body, meta, sequence): refused (0) when the id is known
local function record_push(keys, argv)
  local key = '{f}:t:' .. argv[1]
  if redis.call('EXISTS', key) == 1 then return 0 end
  redis.call('HSET', key, 'u', argv[2], 'p', '3', 'b', argv[3], 'm', argv[4], 'rc', '0',
    'st', 'queued', 'seq', argv[5])
  redis.call('ZADD', '{f}:ready', argv[5], argv[1])
  redis.call('HINCRBY', '{f}:stats', 'pushed', 1)
  return 1
end
local function packed_push(keys, argv)
  local rec = cmsgpack.pack({'queued', '', '', '0', argv[3], argv[4], 0, argv[2], 3})
  if redis.call('HSETNX', '{f}:recs', argv[1], rec) == 0 then return 0 end
  redis.call('ZADD', '{f}:ready', argv[5], argv[1])
  redis.call('HINCRBY', '{f}:stats', 'pushed', 1)
  return 1
end
local function location_push(keys, argv)
  if redis.call('HSETNX', '{f}:bodies', argv[1], argv[3]) == 0 then return 0 end
  redis.call('ZADD', '{f}:ready', argv[5], argv[1])
  redis.call('HINCRBY', '{f}:stats', 'pushed', 1)
  return 1
end
redis.register_function('floor_record_push', record_push)
redis.register_function('floor_packed_push', packed_push)
redis.register_function('floor_location_push', location_push)
"""


def fill(client: redis.Redis, layout: str, count: int) -> None:
    """``count`` ready tasks t0..t<count-1> in ``layout``'s keys (a fresh keyspace)."""
    client.flushall()
    for start in range(0, count, 1000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(count, start + 1000)):
            tid = f"t{i}"
            if layout == "list":
                pipe.rpush("{f}:list", b"%s|%s" % (tid.encode(), BODY))
                continue
            pipe.zadd("{f}:ready", {tid: i})
            if layout == "record":
                pipe.hset(
                    f"{{f}}:t:{tid}",
                    mapping={"u": "u0", "p": 3, "b": BODY, "m": META, "rc": 0, "st": "queued"},
                )
            elif layout == "packed":
                rec = ["queued", "", "", "0", BODY, META, 0, "u0", 3]
                pipe.hset("{f}:recs", tid, msgpack.packb(rec, use_bin_type=False))
            else:
                pipe.hset("{f}:bodies", tid, BODY)
        pipe.execute()


class FloorLoop:
    """Claims of ``batch`` and their finishes in one layout, call after call."""

    prefix = "floor"  # the functions called: <prefix>_<layout>_claim and _finish

    def __init__(self, client: redis.Redis, layout: str, batch: int) -> None:
        self.client, self.layout, self.batch = client, layout, batch
        self.serial = 0

    def claim(self) -> list[bytes]:
        tokens = [f"k{self.serial + k}" for k in range(self.batch)]
        self.serial += self.batch
        reply = self.client.fcall(
            f"{self.prefix}_{self.layout}_claim", 0, self.batch, int(time.time() * 1000), *tokens
        )
        if self.layout == "list":
            return list(reply or [])
        if self.layout == "location":
            ids = reply[0]
            return [b"%s|%s" % (tid, tok.encode()) for tid, tok in zip(ids, tokens, strict=False)]
        step = 4 if self.layout == "record" else 3
        return list(reply[0::step])

    def finish(self, held: list[bytes]) -> None:
        if self.layout != "list" and held:
            done = self.client.fcall(f"{self.prefix}_{self.layout}_finish", 0, *held)
            assert done == len(held), (self.layout, done, len(held))


def claim_into(loop: FloorLoop, held: list[list[bytes]], calls: int) -> None:
    held.extend(loop.claim() for _ in range(calls))


def finish_all(loop: FloorLoop, held: list[list[bytes]]) -> None:
    for h in held:
        loop.finish(h)


def instructions(batch: int, calls: int) -> dict[str, dict[str, float]]:
    """Instructions per task (claim, finish) of every layout and of fairque's scripts."""
    out: dict[str, dict[str, float]] = {}
    with callgrind_server(("fcallCommand",)) as (url, counter):
        client = redis.Redis.from_url(url, socket_timeout=300)
        client.function_load(FLOOR_LIBRARY, replace=True)
        client.function_load(GC_LIBRARY, replace=True)
        client.function_load(LIBRARY.code, replace=True)

        def count(work: Callable[[], object]) -> float:
            return counter.count(client, work) / (calls * batch)

        for layout in LAYOUTS:
            fill(client, layout, batch * (calls + 1))
            loop = FloorLoop(client, layout, batch)
            loop.finish(loop.claim())  # warm
            held: list[list[bytes]] = []
            claim = count(partial(claim_into, loop, held, calls))
            assert len(held) == calls, layout
            assert all(len(h) == batch for h in held), layout
            finish = count(partial(finish_all, loop, held))
            out[layout] = {"claim": claim, "finish": finish}
        functions = dict(LIBRARY.functions)
        for tenants in (1, 100):
            client.flushall()
            got = measure_fairque(url, "floor", functions, counter, tenants, batch, calls)
            out[f"fairque, {tenants} tenant{'s' if tenants > 1 else ''}"] = {
                "claim": got["claim"],
                "finish": got["finish"],
            }
        client.close()
    return out


def push_one(client: redis.Redis, layout: str, i: int) -> None:
    """One push of task p<i> in ``layout`` (the list: a plain LPUSH, no script)."""
    if layout == "list":
        client.lpush("{f}:list", b"p%d|%s" % (i, BODY))
        return
    stored = client.fcall(f"floor_{layout}_push", 0, f"p{i}", "u0", BODY, META, i)
    assert stored == 1, (layout, stored)


def push_instructions(calls: int) -> dict[str, float]:
    """Instructions per one-message push, every layout and fairque's push (100 tenants)."""
    out: dict[str, float] = {}
    with callgrind_server(("fcallCommand", "lpushCommand")) as (url, counter):
        client = redis.Redis.from_url(url, socket_timeout=300)
        client.function_load(FLOOR_LIBRARY, replace=True)
        client.function_load(GC_LIBRARY, replace=True)
        client.function_load(LIBRARY.code, replace=True)
        for layout in LAYOUTS:
            client.flushall()
            for i in range(20):  # warm
                push_one(client, layout, 10**6 + i)
            client.fcall(GC_FUNCTION, 0)
            counter.zero()
            for i in range(calls):
                push_one(client, layout, i)
            out[layout] = counter.dump() / calls
        client.flushall()
        got = measure_fairque_push(
            url, "floorp", dict(LIBRARY.functions), counter, 100, 1000, calls
        )
        out["fairque, 100 tenants"] = got["push"]
        client.close()
    return out


def push_cpu(url: str, what: str, n: int) -> float:
    """Server CPU µs per one-message push, ``n`` pushes one after another."""
    client = redis.Redis.from_url(url)
    client.flushall()
    if what.startswith("fairque"):
        backend = RedisBackend.from_url(url, queue="floorp")
        msgs = [
            Message(task_id=f"p{i}", tenant=f"u{i % 100}", priority=Priority.NORMAL, body=BODY)
            for i in range(n)
        ]
        backend.push(msgs[0])
        before = cpu(client)
        for m in msgs[1:]:
            backend.push(m)
        backend.close()
    else:
        push_one(client, what, 0)
        before = cpu(client)
        for i in range(1, n):
            push_one(client, what, i)
    spent = cpu(client) - before
    client.close()
    return spent / (n - 1) * 1e6


def cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def fairque_fill(url: str, count: int, tenants: int) -> RedisBackend:
    redis.Redis.from_url(url).flushall()
    backend = RedisBackend.from_url(url, queue="floor")
    for start in range(0, count, 1000):
        backend.push_batch(
            [
                Message(
                    task_id=f"t{i}", tenant=f"u{i % tenants}", priority=Priority.NORMAL, body=BODY
                )
                for i in range(start, min(count, start + 1000))
            ]
        )
    return backend


def drain_fairque(backend: RedisBackend, n: int, batch: int) -> None:
    """Claim and finish ``n`` tasks of a filled queue, ``batch`` per call."""
    done = 0
    while done < n:
        got = backend.claim(worker_id="w", count=batch)
        assert got, done
        flags = backend.finish_batch([(c.message.task_id, c.lease.token, None) for c in got])
        assert all(flags)
        done += len(got)


def drain_floor(loop: FloorLoop, n: int) -> None:
    """Claim and finish ``n`` tasks of a filled floor layout, call after call."""
    done = 0
    while done < n:
        held = loop.claim()
        assert held, done
        loop.finish(held)
        done += len(held)


def drain_cpu(url: str, what: str, n: int, batch: int) -> float:
    """Server CPU µs per task of claiming and finishing ``n`` tasks, ``batch`` per call."""
    client = redis.Redis.from_url(url)
    if what.startswith("fairque"):
        backend = fairque_fill(url, n, 100 if "100" in what else 1)
        before = cpu(client)
        drain_fairque(backend, n, batch)
        backend.close()
    else:
        fill(client, what, n)
        loop = FloorLoop(client, what, batch)
        before = cpu(client)
        drain_floor(loop, n)
    spent = cpu(client) - before
    client.close()
    return spent / n * 1e6


def drains(n: int, batch: int, rounds: int, push: bool) -> dict[str, list[float]]:
    from fairque_redis.servers.embedded import EmbeddedValkey

    names = (
        [*LAYOUTS, "fairque, 100 tenants"]
        if push
        else [*LAYOUTS, "fairque, 1 tenant", "fairque, 100 tenants"]
    )
    out: dict[str, list[float]] = {name: [] for name in names}
    with EmbeddedValkey() as server:
        setup = redis.Redis.from_url(server.url)
        setup.function_load(FLOOR_LIBRARY, replace=True)
        setup.close()
        for r in range(rounds):
            for name in names if r % 2 == 0 else list(reversed(names)):
                if push:
                    out[name].append(push_cpu(server.url, name, n))
                else:
                    out[name].append(drain_cpu(server.url, name, n, batch))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=50, help="tasks per claim and finish")
    parser.add_argument("--calls", type=int, default=6, help="counted calls (callgrind)")
    parser.add_argument("--rounds", type=int, default=3, help="drain rounds per layout")
    parser.add_argument("--drain", type=int, default=20_000, help="tasks per drain")
    parser.add_argument(
        "--push", action="store_true", help="one-message pushes instead of claims and finishes"
    )
    parser.add_argument("--skip-callgrind", action="store_true")
    parser.add_argument("--skip-drain", action="store_true")
    opts = parser.parse_args()
    if opts.push:
        calls = opts.calls if opts.calls != 6 else 200
        pushed = {} if opts.skip_callgrind else push_instructions(calls)
        timed = {} if opts.skip_drain else drains(opts.drain, opts.batch, opts.rounds, True)
        print(
            f"one-message pushes: instructions per push inside FCALL/LPUSH ({calls} pushes, "
            f"callgrind); server CPU per push of {opts.drain:,} pushes one by one (INFO cpu, "
            f"median of {opts.rounds} rounds; load average {os.getloadavg()[0]:.1f})"
        )
        print(f"  {'layout':<22}{'push':>10}{'server µs':>10}")
        for name in dict.fromkeys([*pushed, *timed]):
            line = f"  {name:<22}"
            line += f"{pushed[name]:>10,.0f}" if name in pushed else " " * 10
            if name in timed:
                line += f"{statistics.median(timed[name]):>10.1f}"
            print(line)
        return
    counted = {} if opts.skip_callgrind else instructions(opts.batch, opts.calls)
    timed = {} if opts.skip_drain else drains(opts.drain, opts.batch, opts.rounds, False)
    print(
        f"claims and finishes of {opts.batch}; instructions inside FCALL per task "
        f"({opts.calls} calls, callgrind); server CPU per task of a {opts.drain:,}-task drain "
        f"(INFO cpu, median of {opts.rounds} rounds; load average {os.getloadavg()[0]:.1f})"
    )
    print(f"  {'layout':<22}{'claim':>10}{'finish':>10}{'both':>10}{'drain µs':>10}")
    for name in dict.fromkeys([*counted, *timed]):
        c = counted.get(name)
        line = f"  {name:<22}"
        if c:
            line += f"{c['claim']:>10,.0f}{c['finish']:>10,.0f}{c['claim'] + c['finish']:>10,.0f}"
        else:
            line += " " * 30
        if name in timed:
            line += f"{statistics.median(timed[name]):>10.1f}"
        print(line)
    print("  issue 17's target: <= 25 µs of server CPU per drained task")


if __name__ == "__main__":
    main()
