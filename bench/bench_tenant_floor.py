"""What serving many tenants costs a claim and a finish at least, by where tenant state lives.

    uv run --no-sync python bench/bench_tenant_floor.py [--tenants T ...] [--batch N]
        [--calls C] [--rounds R] [--drain N] [--skip-callgrind] [--skip-drain]

``bench_layout_floor.py`` (ADR 49) prices the least claim and finish of a task record with no
tenants at all; fairque's own scripts cost about twice as much per task with 100 tenants as with
one (``bench_lua_profile.py``: a served tenant is read, popped, counted and rescored once per
task when a claim of 50 serves 50 tenants). This bench asks how much of that any script pays
whose tenant state lives where fairque keeps it, and how much a different place would save.
A small function library (``fq_tfloor``) runs the least fair claim and finish over ``T``
tenants, with equal weights, on fairque's task records, in three layouts:

- ``keys``: fairque's layout. A tenant's ready tasks are a sorted set of its own; its pass
  and stride a hash of its own; its figures (leased, claimed, finished) another. A claim reads
  the active set's window (one ZRANGE), splits its ``N`` places over the window's tenants in
  pass order, and per served tenant reads its hash (HMGET), pops its tasks (ZPOPMIN of its
  count), reads what is left (ZCARD), writes its pass (HSET) and counts it (two HINCRBY);
  per task it leases the record (HSET) and reads it (HMGET); one ZADD rescoring the served
  tenants (a tenant left empty is removed: ZREM), one ZADD of the leases. A finish: per task
  the record read, written and expired (HMGET, HSET, PEXPIRE); per tenant two HINCRBY; one
  ZREM of the leases.
- ``table``: every tenant's hot state in one hash per queue (the tenant table): its stride,
  ready count, leased, claimed and finished as fields ``<field>:<tenant>``. A claim reads the
  window, then the served tenants' fields in one HMGET, pops each served tenant's tasks
  (ZPOPMIN, the one command per tenant left), writes the fields back in one HSET; per task the
  same two record commands; the same two ZADDs. A finish: the same three per task, the
  tenants' fields in one HMGET and one HSET, one ZREM. The table is kept a hash table (one
  value longer than ``hash-max-listpack-value``): as a listpack, an HMGET of many fields scans
  it once per field.

- ``stamped``: one ready set for all tenants, each task scored at push with its tenant's
  virtual finish time (start-time fair queueing; the push, not measured here, reads and writes
  its tenant's last tag): a claim pops its ``N`` tasks at once (one ZPOPMIN), leases them as
  above and counts the served tenants in the table (one HMGET, one HSET); the finish is
  ``table``'s. The fill stamps task ``i`` of the round robin with ``i``, the order equal
  weights give.

None checks damaged keys, limits, pauses, tiers or priorities: they are floors. Printed per
``T`` (default 1, 10, 100), batches of ``N`` (default 50): instructions per task inside FCALL
under callgrind (load-independent; ``C`` counted calls) for the claim, the finish and both,
beside fairque's own scripts on the same tenants (``bench_claim_finish_ir.measure``); and the
server CPU per task of a drain (INFO cpu, claims and finishes of ``N``, ``--drain`` tasks, the
builds taking turns, medians of ``R`` rounds). The gap between ``keys`` and ``table`` is what
moving tenant state into one hash could save; the gap between ``keys`` and fairque is what
fairque's features cost on top of its layout. Figures: docs/benchmarks-history.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from functools import partial

import redis
from _callgrind import GC_LIBRARY, callgrind_server
from bench_claim_finish_ir import measure as measure_fairque
from bench_layout_floor import (
    BODY,
    META,
    FloorLoop,
    claim_into,
    cpu,
    drain_fairque,
    drain_floor,
    fairque_fill,
    finish_all,
)

from fairque_redis.scripting.function_library import LIBRARY

LAYOUTS = ("keys", "table", "stamped")

# ARGV of a claim: N, now ms, then N tokens; of a finish: the ids. Keys in one hash tag, {g}.
TENANT_FLOOR_LIBRARY = r"""#!lua name=fq_tfloor
local STRIDE = 1000
-- the window's served tenants and how many tasks each gets: the N places in pass order, round
-- robin over the window (equal weights: every tenant of the window gets N / #window, the
-- lowest passes one more), no tenant more than it has (`ready`, read by the caller)
local function split(window, n, ready)
  local per, order = {}, {}
  local left = n
  while left > 0 do
    local gave = 0
    for k = 1, #window, 2 do
      local u = window[k]
      local have = ready(u)
      local got = per[u] or 0
      if left > 0 and got < have then
        if got == 0 then order[#order + 1] = u end
        per[u] = got + 1
        left = left - 1
        gave = gave + 1
      end
    end
    if gave == 0 then break end
  end
  return per, order
end
local function lease_tasks(ids, argv, at, dl, out, leases)
  for k = 1, #ids, 2 do
    local id = ids[k]
    local key = '{g}:t:' .. id
    redis.call('HSET', key, 'st', 'started', 'tok', argv[at[1]], 'wk', 'w', 'dl', dl)
    at[1] = at[1] + 1
    local v = redis.call('HMGET', key, 'b', 'm', 'rc')
    leases[#leases + 1] = dl
    leases[#leases + 1] = id
    out[#out + 1] = id
    out[#out + 1] = v[1]
  end
end
local function keys_claim(keys, argv)
  local n, dl = tonumber(argv[1]), tostring(tonumber(argv[2]) + 30000)
  local window = redis.call('ZRANGE', '{g}:active', 0, n - 1, 'WITHSCORES')
  local state = {}
  local function ready(u)
    local s = state[u]
    if s == nil then
      local v = redis.call('HMGET', '{g}:tenant:' .. u, 'pass', 'stride')
      s = {pass = tonumber(v[1]) or 0, stride = tonumber(v[2]) or STRIDE,
        left = redis.call('ZCARD', '{g}:n:' .. u)}
      state[u] = s
    end
    return s.left
  end
  local per, order = split(window, n, ready)
  local out, leases, rescored, gone, at = {}, {}, {}, {}, {3}
  for _, u in ipairs(order) do
    local s, k = state[u], per[u]
    lease_tasks(redis.call('ZPOPMIN', '{g}:n:' .. u, k), argv, at, dl, out, leases)
    s.pass = s.pass + k * s.stride
    redis.call('HSET', '{g}:tenant:' .. u, 'pass', s.pass)
    redis.call('HINCRBY', '{g}:ts:' .. u, 'leased', k)
    redis.call('HINCRBY', '{g}:ts:' .. u, 'claimed', k)
    if s.left > k then
      rescored[#rescored + 1] = s.pass
      rescored[#rescored + 1] = u
    else
      gone[#gone + 1] = u
    end
  end
  if #rescored > 0 then redis.call('ZADD', '{g}:active', unpack(rescored)) end
  if #gone > 0 then redis.call('ZREM', '{g}:active', unpack(gone)) end
  if #leases > 0 then redis.call('ZADD', '{g}:leases', unpack(leases)) end
  return out
end
-- the records of a finish (argv: the ids) made finished, every layout's same three commands
-- per task; returns the finished ids, the tasks per tenant and the tenants in first-seen order
local function finish_records(argv)
  local done, per, order = {}, {}, {}
  for k = 1, #argv do
    local key = '{g}:t:' .. argv[k]
    local v = redis.call('HMGET', key, 'st', 'tok', 'u')
    if v[1] == 'started' then
      redis.call('HSET', key, 'st', 'finished', 'exp', '0', 'b', '', 'm', '')
      redis.call('PEXPIRE', key, 3600000)
      done[#done + 1] = argv[k]
      local u = v[3]
      if per[u] == nil then order[#order + 1] = u end
      per[u] = (per[u] or 0) + 1
    end
  end
  return done, per, order
end
local function keys_finish(keys, argv)
  local done, per = finish_records(argv)
  for u, k in pairs(per) do
    redis.call('HINCRBY', '{g}:ts:' .. u, 'leased', -k)
    redis.call('HINCRBY', '{g}:ts:' .. u, 'finished', k)
  end
  if #done > 0 then redis.call('ZREM', '{g}:leases', unpack(done)) end
  return #done
end
local function table_claim(keys, argv)
  local n, dl = tonumber(argv[1]), tostring(tonumber(argv[2]) + 30000)
  local window = redis.call('ZRANGE', '{g}:active', 0, n - 1, 'WITHSCORES')
  -- the window's tenants' fields in one read: stride, ready, leased, claimed
  local fields = {}
  for k = 1, #window, 2 do
    local u = window[k]
    fields[#fields + 1] = 's:' .. u
    fields[#fields + 1] = 'r:' .. u
    fields[#fields + 1] = 'l:' .. u
    fields[#fields + 1] = 'c:' .. u
  end
  local state = {}
  if #fields > 0 then
    local v = redis.call('HMGET', '{g}:tt', unpack(fields))
    for k = 1, #window, 2 do
      local o = (k - 1) * 2
      state[window[k]] = {pass = tonumber(window[k + 1]), stride = tonumber(v[o + 1]) or STRIDE,
        left = tonumber(v[o + 2]) or 0, leased = tonumber(v[o + 3]) or 0,
        claimed = tonumber(v[o + 4]) or 0}
    end
  end
  local per, order = split(window, n, function(u) return state[u].left end)
  local out, leases, rescored, gone, sets, at = {}, {}, {}, {}, {}, {3}
  for _, u in ipairs(order) do
    local s, k = state[u], per[u]
    lease_tasks(redis.call('ZPOPMIN', '{g}:n:' .. u, k), argv, at, dl, out, leases)
    s.pass = s.pass + k * s.stride
    sets[#sets + 1] = 'r:' .. u
    sets[#sets + 1] = s.left - k
    sets[#sets + 1] = 'l:' .. u
    sets[#sets + 1] = s.leased + k
    sets[#sets + 1] = 'c:' .. u
    sets[#sets + 1] = s.claimed + k
    if s.left > k then
      rescored[#rescored + 1] = s.pass
      rescored[#rescored + 1] = u
    else
      gone[#gone + 1] = u
      sets[#sets + 1] = 'p:' .. u -- the pass kept while inactive (for its next activation)
      sets[#sets + 1] = s.pass
    end
  end
  if #sets > 0 then redis.call('HSET', '{g}:tt', unpack(sets)) end
  if #rescored > 0 then redis.call('ZADD', '{g}:active', unpack(rescored)) end
  if #gone > 0 then redis.call('ZREM', '{g}:active', unpack(gone)) end
  if #leases > 0 then redis.call('ZADD', '{g}:leases', unpack(leases)) end
  return out
end
-- the served tenants' figures in the table, one HMGET and one HSET: `leased` by `sign` times
-- each tenant's count, the counter `named` (a field prefix) by the count; `sets` may hold
-- other fields the HSET writes too
local function count_tenants(order, per, sign, named, sets)
  local fields = {}
  for _, u in ipairs(order) do
    fields[#fields + 1] = 'l:' .. u
    fields[#fields + 1] = named .. u
  end
  local v = redis.call('HMGET', '{g}:tt', unpack(fields))
  for j, u in ipairs(order) do
    sets[#sets + 1] = fields[2 * j - 1]
    sets[#sets + 1] = (tonumber(v[2 * j - 1]) or 0) + sign * per[u]
    sets[#sets + 1] = fields[2 * j]
    sets[#sets + 1] = (tonumber(v[2 * j]) or 0) + per[u]
  end
  redis.call('HSET', '{g}:tt', unpack(sets))
end
local function table_finish(keys, argv)
  local done, per, order = finish_records(argv)
  if #order > 0 then count_tenants(order, per, -1, 'f:', {}) end
  if #done > 0 then redis.call('ZREM', '{g}:leases', unpack(done)) end
  return #done
end
redis.register_function('tfloor_keys_claim', keys_claim)
redis.register_function('tfloor_keys_finish', keys_finish)
redis.register_function('tfloor_table_claim', table_claim)
redis.register_function('tfloor_table_finish', table_finish)
-- stamped: one ready set for every tenant, each task scored at push by its tenant's virtual
-- finish time (start-time fair queueing), so the claim pops the N lowest at once; the served
-- tenants' figures in the table, as above; the queue's virtual time (the last tag served)
local function stamped_claim(keys, argv)
  local n, dl = tonumber(argv[1]), tostring(tonumber(argv[2]) + 30000)
  local got = redis.call('ZPOPMIN', '{g}:ready', n)
  local out, leases, per, order, at = {}, {}, {}, {}, 3
  for k = 1, #got, 2 do
    local id = got[k]
    local key = '{g}:t:' .. id
    redis.call('HSET', key, 'st', 'started', 'tok', argv[at], 'wk', 'w', 'dl', dl)
    at = at + 1
    local v = redis.call('HMGET', key, 'b', 'm', 'rc', 'u')
    leases[#leases + 1] = dl
    leases[#leases + 1] = id
    out[#out + 1] = id
    out[#out + 1] = v[1]
    local u = v[4]
    if per[u] == nil then order[#order + 1] = u end
    per[u] = (per[u] or 0) + 1
  end
  if #order > 0 then
    count_tenants(order, per, 1, 'c:', {'vt', got[#got]})
    redis.call('ZADD', '{g}:leases', unpack(leases))
  end
  return out
end
redis.register_function('tfloor_stamped_claim', stamped_claim)
redis.register_function('tfloor_stamped_finish', table_finish)
"""


def fill(client: redis.Redis, layout: str, count: int, tenants: int) -> None:
    """``count`` ready tasks t0.. over ``tenants`` tenants (u<i % T>), every tenant active at
    pass 0, in ``layout``'s keys (a fresh keyspace)."""
    client.flushall()
    per: dict[str, int] = {}
    for start in range(0, count, 1000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(count, start + 1000)):
            tid, tenant = f"t{i}", f"u{i % tenants}"
            per[tenant] = per.get(tenant, 0) + 1
            if layout == "stamped":  # its tenant's (i // T)-th task: tags order as i
                pipe.zadd("{g}:ready", {tid: i})
            else:
                pipe.zadd(f"{{g}}:n:{tenant}", {tid: i})
            pipe.hset(
                f"{{g}}:t:{tid}",
                mapping={"u": tenant, "p": 3, "b": BODY, "m": META, "rc": 0, "st": "queued"},
            )
        pipe.execute()
    pipe = client.pipeline(transaction=False)
    if layout != "keys":
        # one value longer than hash-max-listpack-value (64) keeps the table a hash table: a
        # listpack of hundreds of fields answers an HMGET of many fields field by field,
        # each a scan of the whole listpack (measured: the claim x2.3 at 100 tenants)
        pipe.hset("{g}:tt", "pad", "x" * 65)
    for tenant, ready in per.items():
        if layout == "stamped":  # no active set: its tenants' places are their tasks' tags
            continue
        pipe.zadd("{g}:active", {tenant: 0})
        if layout == "keys":
            pipe.hset(f"{{g}}:tenant:{tenant}", mapping={"pass": 0, "stride": 1000})
        else:
            pipe.hset("{g}:tt", mapping={f"s:{tenant}": 1000, f"r:{tenant}": ready})
    pipe.execute()


class Loop(FloorLoop):
    """Claims of ``batch`` and their finishes in one layout (``tfloor_<layout>_*``); a
    claim's reply is id, body per task."""

    prefix = "tfloor"

    def claim(self) -> list[bytes]:
        tokens = [f"k{self.serial + k}" for k in range(self.batch)]
        self.serial += self.batch
        reply = self.client.fcall(
            f"{self.prefix}_{self.layout}_claim", 0, self.batch, int(time.time() * 1000), *tokens
        )
        return list(reply[0::2])


def instructions(tenants: list[int], batch: int, calls: int) -> dict[str, dict[str, float]]:
    """Instructions per task (claim, finish) of both layouts and fairque's scripts, per T."""
    out: dict[str, dict[str, float]] = {}
    with callgrind_server(("fcallCommand",)) as (url, counter):
        client = redis.Redis.from_url(url, socket_timeout=300)
        for code in (TENANT_FLOOR_LIBRARY, GC_LIBRARY, LIBRARY.code):
            client.function_load(code, replace=True)

        def count(work: Callable[[], object]) -> float:
            return counter.count(client, work) / (calls * batch)

        for t in tenants:
            for layout in LAYOUTS:
                fill(client, layout, batch * (calls + 2), t)
                loop = Loop(client, layout, batch)
                loop.finish(loop.claim())  # warm
                held: list[list[bytes]] = []
                claim = count(partial(claim_into, loop, held, calls))
                assert all(len(h) == batch for h in held), (layout, t)
                finish = count(partial(finish_all, loop, held))
                out[f"{layout}, {t}"] = {"claim": claim, "finish": finish}
            client.flushall()
            got = measure_fairque(url, "tfloor", dict(LIBRARY.functions), counter, t, batch, calls)
            out[f"fairque, {t}"] = {"claim": got["claim"], "finish": got["finish"]}
        client.close()
    return out


def drain_cpu(url: str, what: str, tenants: int, n: int, batch: int) -> float:
    """Server CPU µs per task of claiming and finishing ``n`` tasks, ``batch`` per call."""
    client = redis.Redis.from_url(url)
    if what == "fairque":
        backend = fairque_fill(url, n, tenants)
        before = cpu(client)
        drain_fairque(backend, n, batch)
        backend.close()
    else:
        client.function_load(TENANT_FLOOR_LIBRARY, replace=True)
        fill(client, what, n, tenants)
        before = cpu(client)
        drain_floor(Loop(client, what, batch), n)
    spent = cpu(client) - before
    client.close()
    return spent / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--batch", type=int, default=50, help="tasks per claim and finish")
    parser.add_argument("--calls", type=int, default=6, help="counted calls (callgrind)")
    parser.add_argument("--rounds", type=int, default=3, help="drain rounds per build")
    parser.add_argument("--drain", type=int, default=10_000, help="tasks per drain")
    parser.add_argument("--skip-callgrind", action="store_true")
    parser.add_argument("--skip-drain", action="store_true")
    opts = parser.parse_args()
    print(f"loadavg at start: {os.getloadavg()}")
    names = [*LAYOUTS, "fairque"]
    if not opts.skip_callgrind:
        got = instructions(opts.tenants, opts.batch, opts.calls)
        print(
            f"\ninstructions per task inside FCALL (callgrind), claims and finishes of "
            f"{opts.batch}, {opts.calls} counted calls each"
        )
        print(f"{'tenants':>7}  {'build':8} {'claim':>9} {'finish':>9} {'both':>9} {'x keys':>7}")
        for t in opts.tenants:
            base = got[f"keys, {t}"]["claim"] + got[f"keys, {t}"]["finish"]
            for name in names:
                row = got[f"{name}, {t}"]
                both = row["claim"] + row["finish"]
                print(
                    f"{t:>7}  {name:8} {row['claim']:>9,.0f} {row['finish']:>9,.0f} "
                    f"{both:>9,.0f} {both / base:>7.3f}"
                )
    if not opts.skip_drain:
        from fairque_redis.servers.embedded import EmbeddedValkey

        timed: dict[tuple[str, int], list[float]] = {}
        with EmbeddedValkey() as server:
            for r in range(opts.rounds):
                for t in opts.tenants:
                    for name in names if r % 2 == 0 else list(reversed(names)):
                        timed.setdefault((name, t), []).append(
                            drain_cpu(server.url, name, t, opts.drain, opts.batch)
                        )
        print(
            f"\nserver CPU per drained task (INFO cpu), {opts.drain:,} tasks, claims and "
            f"finishes of {opts.batch}, median of {opts.rounds} rounds (builds alternating)"
        )
        for t in opts.tenants:
            line = "  ".join(
                f"{name} {statistics.median(timed[(name, t)]):6.1f} µs" for name in names
            )
            print(f"{t:>7} tenants: {line}")
    print(f"\nloadavg at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
