"""``fairque doctor --repair``: put one queue's Redis structures back in line with its task
records (the invariants of :mod:`fairque_redis.doctor.examine`), for what an outside hand or a
script
that failed half-way broke. Run it on a quiet queue (workers stopped or idle).

In this order, each step on a fresh snapshot:

1. keys of the wrong Redis type (an operator's ``SET`` on a queue key) are deleted: they hold
   nothing fairque can read; what they indexed is rebuilt from the task records below;
   Then a meta counter that is not a number is recomputed from the data, and a deferred task
   whose parents have all ended is released or canceled (:mod:`fairque_redis.doctor.deps`);
2. ids in a structure (``c:``/``n:``/``delayed``/``leases``/``dlq``) without a live task hash
   of their state are removed (orphan leases, stray ready entries);
3. every live task goes where its state says: queued -> its tenant's queue, started without a
   lease -> back to ready (its lease is gone, nobody can finish it), scheduled -> ``delayed``,
   failed -> ``dlq`` (a score that is not a whole number back to the record's ``mv``);
4. active sets: members whose tenant has no ready work, is paused or capped, stale or
   duplicate members are removed; a tenant with ready work and no member is activated (at the
   tier's virtual time) unless a pause or a limit holds it out (paused, capped, parked: left as
   they are; a cap with no lease left to end is lifted); ``tiers`` holds the tiers with an
   active tenant;
5. gauges and counters are recomputed: meta ``ready``, the tenants' ``scheduled``/``leased``,
   every queue counter in ``stats`` = the sum of the tenants' (a tenant's figures lost with a
   damaged ``ts:`` key are lost for the queue too); a tenant with pushes missing from the
   ``tenants`` index is put back, at the end of its first-push order. (After step 3, a deferred
   task is put back in the ``children:`` list of each parent its ``waits:`` set names.)
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from fairque_core.domain.enums import Priority
from fairque_core.domain.scoring import seq_member, static_score
from fairque_redis.doctor.deps import release
from fairque_redis.doctor.examine import (
    Parsed,
    Where,
    held_tenants,
    key_space,
    meta_numbers,
    node_client,
    parse,
    snapshot,
    stored_int,
    whole,
)
from fairque_redis.keys import KeySpace

__all__ = ["repair"]

_SEQ_DIGITS = 16
_GAUGES = ("scheduled", "leased")
_CRITICAL = 6
#: passes of the release step at most (each cancel may strand the canceled task's children)
_RELEASE_ROUNDS = 16


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _int(raw: bytes | str | None, default: int = 0) -> int:
    value = None if raw is None else stored_int(raw)
    return default if value is None else value


def _num(raw: bytes | str | None) -> int | None:
    """A stored count: 0 when absent, None when it is not a number (a damaged field, which
    the recount rewrites: read as 0 it matched a real 0 and stayed, and every claim failed)."""
    return 0 if raw is None else stored_int(raw)


def _read(client: Any, queue: Where) -> Parsed:
    return parse(snapshot(client, queue), queue)


def repair(
    client: Any,
    queue: Where,
    *,
    horizon_ms: int = 300_000,
    strict_tiers: bool = False,
) -> list[str]:
    """Repair ``queue`` (a queue's name, or one partition's key space); one sentence per
    change made (``[]``: nothing to repair)."""
    client = node_client(client, queue)
    keys = key_space(queue)
    done: list[str] = []

    # 1. keys of the wrong type
    parsed = _read(client, queue)
    for suffix, kind, want in parsed.damaged:
        client.delete(keys.prefix + suffix)
        done.append(f"deleted {keys.prefix}{suffix} (a {kind}, fairque keeps a {want} there)")
    if parsed.damaged:
        parsed = _read(client, queue)
    if _fix_meta(client, keys, parsed, done):
        parsed = _read(client, queue)
    # deferred tasks nothing would release (a cancel may strand its own children: again)
    for _ in range(_RELEASE_ROUNDS):
        if not release(client, keys, parsed, done):
            break
        parsed = _read(client, queue)
    _place_tasks(client, keys, parsed, done, horizon_ms)
    _relink_children(client, keys, parsed, done)
    parsed = _read(client, queue)
    _fix_active(client, keys, parsed, done, strict_tiers)
    parsed = _read(client, queue)
    _recount(client, keys, parsed, done)
    return done


def _fix_meta(client: Any, keys: KeySpace, p: Parsed, done: list[str]) -> bool:
    """A meta counter that is not a number (every push and claim refuses the queue then) is
    recomputed from the data: ``seq`` the highest task's, ``act`` the highest activation
    number, ``vtime`` (and a tier's) the lowest pass of an active tenant; the rate state
    (``qtat``, ``qhold``) restarts at 0; ``ready`` is recounted by step 5."""
    meta = p.single.get("meta", {})
    broken = [
        name
        for name in meta_numbers(meta)
        if name != "ready" and stored_int(meta[name]) is None  # ready: recounted in step 5
    ]
    if not broken:
        return False
    acts = [_int(rec.get("act")) for rec in p.tenant.values()]
    acts += [_int(m[:_SEQ_DIGITS]) for members in p.raw_active.values() for m, _ in members]
    fixed: dict[str, str] = {}
    for name in broken:
        if name == "seq":
            value = max((_int(rec.get("seq")) for rec in p.tasks.values()), default=0)
        elif name == "act":
            value = max(acts, default=0)
        elif name.startswith("vtime"):
            tier = name.partition(":")[2]
            passes = [
                int(score)
                for t, members in p.active.items()
                if not tier or t == tier
                for _, score in members
            ]
            value = min(passes, default=0)
        else:  # qtat/qhold: the queue's rate state starts afresh
            value = 0
        fixed[name] = str(value)
        done.append(f"meta {name} {_text(meta[name])[:40]!r} -> {value} (not a number)")
    client.hset(keys.meta, mapping=fixed)
    return True


def _relink_children(client: Any, keys: KeySpace, p: Parsed, done: list[str]) -> None:
    """A deferred task is in the children list of each parent it waits for (rebuilt from its
    ``waits:`` set: a damaged ``children:`` key deleted in step 1 left the child waiting for
    ever, with the doctor calling the queue sound)."""
    pipe = client.pipeline(transaction=True)
    for task_id in sorted(p.waits):
        rec = p.live(task_id)
        if rec is None or _text(rec["st"]) != "deferred":
            continue
        for parent in sorted(_text(w) for w in p.waits[task_id]):
            if task_id not in p.children.get(parent, ()):
                pipe.rpush(keys.children(parent), task_id)
                done.append(f"task {task_id} back in the children of {parent}")
    pipe.execute()


def _place_tasks(client: Any, keys: KeySpace, p: Parsed, done: list[str], horizon_ms: int) -> None:
    """Steps 2 and 3: every id where its live record's state says, and only there."""
    pipe = client.pipeline(transaction=True)
    present: dict[str, list[str]] = {}  # task id -> structures holding it
    for tenant, ids in p.critical.items():
        for task_id in ids:
            present.setdefault(task_id, []).append(f"c:{tenant}")
    for tenant, members in p.normal.items():
        for member, _ in members:
            present.setdefault(member[_SEQ_DIGITS:], []).append(f"n:{tenant}")
    for name in ("delayed", "leases", "dlq"):
        for task_id, _ in p.single.get(name, []):
            present.setdefault(task_id, []).append(name)
    for scope, members in p.key_parked.items():  # parked by a limit key (ADR 79)
        for task_id, _ in members:
            present.setdefault(task_id, []).append(f"kp:{scope}")

    dlq_scores = dict(p.single.get("dlq", []))

    def want_of(task_id: str) -> str | None:
        rec = p.live(task_id)
        if rec is None:
            return None
        state, tenant = _text(rec["st"]), _text(rec.get("u", b""))
        if state == "queued" and rec.get("kp"):  # parked: stays in its scope's set
            return f"kp:{_text(rec['kp'])}"
        if state == "queued" and tenant:
            return f"c:{tenant}" if _int(rec.get("p")) == _CRITICAL else f"n:{tenant}"
        if state == "started":
            return "leases" if rec.get("tok") else None
        return {"scheduled": "delayed", "failed": "dlq"}.get(state)

    def remove(task_id: str, where: str) -> None:
        key = keys.prefix + where
        if where.startswith("c:"):
            pipe.lrem(key, 0, task_id)
        elif where.startswith("n:"):
            tenant = where[2:]
            for member, _ in p.normal.get(tenant, []):
                if member[_SEQ_DIGITS:] == task_id:
                    pipe.zrem(key, member)
        else:
            pipe.zrem(key, task_id)
        done.append(f"removed task {task_id} from {where} (its record says otherwise)")

    for task_id, places in sorted(present.items()):
        want = want_of(task_id)
        for where in places:
            if where != want:
                remove(task_id, where)
    for task_id in sorted(p.tasks):
        rec = p.live(task_id)
        if rec is None:
            continue
        state, tenant = _text(rec["st"]), _text(rec.get("u", b""))
        if not tenant:
            continue
        want = want_of(task_id)
        if state == "started" and (want is None or "leases" not in present.get(task_id, [])):
            # started without a lease (token or entry): nobody can finish it; back to ready
            state, want = "queued", None
            pipe.hset(
                keys.task(task_id),
                mapping={"st": "queued", "tok": "", "wk": "", "dl": "0", "rd": str(p.now)},
            )
            done.append(f"task {task_id} was started without a lease: back to ready")
            rec = {**rec, "rd": str(p.now).encode()}
        if state == "queued" and rec.get("kp"):
            if want in present.get(task_id, []):
                continue  # parked where its record says
            pipe.hdel(keys.task(task_id), "kp")  # its parked set lost it: back to ready
            done.append(f"task {task_id} was parked outside its key's set: back to ready")
        if state == "queued":
            prio = _int(rec.get("p"), 3)
            where = f"c:{tenant}" if prio == _CRITICAL else f"n:{tenant}"
            if where in present.get(task_id, []) and want == where:
                continue
            if prio == _CRITICAL:
                pipe.rpush(keys.critical(tenant), task_id)
            else:
                ready_ms = _int(rec.get("rd"), p.now)
                score = static_score(Priority(max(1, min(prio, 5))), ready_ms, horizon_ms)
                member = seq_member(_int(rec.get("seq")), task_id)
                pipe.zadd(keys.normal(tenant), {member: score})
            done.append(f"task {task_id} (queued) put back into {where}")
        elif state == "scheduled" and "delayed" not in present.get(task_id, []):
            pipe.zadd(keys.delayed, {task_id: _int(rec.get("due"), p.now)})
            done.append(f"task {task_id} (scheduled) put back into delayed")
        elif state == "failed" and "dlq" not in present.get(task_id, []):
            pipe.zadd(keys.dlq, {task_id: _int(rec.get("mv"), p.now)})
            done.append(f"task {task_id} (failed) put back into the dlq")
        elif state == "failed" and not whole(dlq_scores.get(task_id, 0.0)):
            moved = _int(rec.get("mv"), p.now)
            pipe.zadd(keys.dlq, {task_id: moved})
            done.append(f"dlq entry {task_id}: score {dlq_scores[task_id]!r} -> {moved}")
    pipe.execute()


def _fix_active(client: Any, keys: KeySpace, p: Parsed, done: list[str], strict: bool) -> None:
    """Step 4: a tenant is in one active set, with its own member, exactly while it has work
    and nothing holds it out (a pause, its cap, its rate: it is let in by resume, the end of a
    lease, the claim's due-move step; putting it back here would lift the pause or limit)."""
    meta = p.single.get("meta", {})
    pipe = client.pipeline(transaction=True)
    ready = {u for u, ids in p.critical.items() if ids} | {u for u, m in p.normal.items() if m}
    held = held_tenants(p)
    leasing = {_text(p.tasks.get(t, {}).get("u", b"")) for t, _ in p.single.get("leases", [])}
    for tenant, why in sorted(held.items()):
        if why == "capped" and tenant not in leasing:
            # no lease left whose end would let it in: it would wait for ever
            pipe.hdel(keys.tenant(tenant), "capd")
            done.append(f"lifted tenant {tenant}'s cap (capped, but it holds no lease)")
            del held[tenant]
    # paused and capped tenants leave their active set; a parked one may be back in already
    may_run = ready - {u for u, why in held.items() if why in ("paused", "capped")}
    stay_out = (ready - may_run) | {u for u, why in held.items() if why == "parked"}
    seen: set[str] = set()
    act = _int(meta.get("act"))
    for tier, members in sorted(p.raw_active.items()):
        for member, _ in members:
            tenant = member.rpartition("|")[2]
            record = p.tenant.get(tenant, {})
            own = f"{_int(record.get('act'), -1):0{_SEQ_DIGITS}d}|{tenant}"
            tier_ok = not strict or str(_int(record.get("tier"))) == tier
            if tenant in may_run and tenant not in seen and member == own and tier_ok:
                seen.add(tenant)
                continue
            pipe.zrem(keys.active(int(tier)), member)
            why = "no ready work" if tenant not in ready else "not the tenant's own member"
            if tenant in ready and tenant not in may_run:
                why = held[tenant]
            done.append(f"removed {member!r} from active:{tier} ({why})")
    tiers: set[str] = set()
    for tier, members in p.raw_active.items():
        if any(m.rpartition("|")[2] in seen for m, _ in members):
            tiers.add(tier)
    for tenant in sorted(ready - seen - stay_out):
        record = p.tenant.get(tenant, {})
        tier = str(_int(record.get("tier"))) if strict else "0"
        vtime = _int(meta.get(f"vtime:{tier}") if strict else None, _int(meta.get("vtime")))
        pass_ = max(_int(record.get("pass")), vtime)
        act += 1
        pipe.zadd(keys.active(int(tier)), {f"{act:0{_SEQ_DIGITS}d}|{tenant}": pass_})
        pipe.hset(keys.tenant(tenant), mapping={"pass": str(pass_), "act": str(act)})
        tiers.add(tier)
        done.append(f"activated tenant {tenant} (ready work, no active-set member)")
    pipe.hset(keys.meta, "act", str(act))
    have = {member for member, _ in p.single.get("tiers", [])}
    for tier in have - tiers:
        pipe.zrem(keys.tiers, tier)
        done.append(f"removed tier {tier} from tiers (no active tenant)")
    for tier in tiers - have:
        pipe.zadd(keys.tiers, {tier: int(tier)})
        done.append(f"added tier {tier} to tiers")
    pipe.execute()


def _recount(client: Any, keys: KeySpace, p: Parsed, done: list[str]) -> None:
    """Step 5: gauges from the real cardinalities, queue counters from the tenants'."""
    pipe = client.pipeline(transaction=True)
    real: dict[str, Counter[str]] = {name: Counter() for name in _GAUGES}
    for task_id in p.tasks:
        rec = p.live(task_id)
        if rec is None:
            continue
        state, tenant = _text(rec["st"]), _text(rec.get("u", b""))
        if state == "scheduled":
            real["scheduled"][tenant] += 1
        elif state == "started":
            real["leased"][tenant] += 1
    tenants = set(p.tenant_stats) | set(real["scheduled"]) | set(real["leased"])
    for tenant in sorted(tenants):
        stats = p.tenant_stats.get(tenant, {})
        for name in _GAUGES:
            have = _num(stats.get(name))
            if have != real[name][tenant]:
                pipe.hset(keys.tenant_stats(tenant), name, str(real[name][tenant]))
                done.append(
                    f"tenant {tenant}: {name} {_shown(stats.get(name))} -> {real[name][tenant]}"
                )
    ready = sum(len(v) for v in p.critical.values()) + sum(len(v) for v in p.normal.values())
    meta = p.single.get("meta", {})
    if _num(meta.get("ready")) != ready:
        pipe.hset(keys.meta, "ready", str(ready))
        done.append(f"meta ready {_shown(meta.get('ready'))} -> {ready}")
    totals: Counter[str] = Counter()
    for tenant, stats in sorted(p.tenant_stats.items()):
        for name, value in stats.items():
            if name in _GAUGES:
                continue
            count = _num(value)
            if count is None:  # a counter is history: it cannot be recounted, only restarted
                pipe.hset(keys.tenant_stats(tenant), name, "0")
                done.append(f"tenant {tenant}: counter {name} {_shown(value)} -> 0 (not a number)")
                count = 0
            totals[name] += count
    queue_stats = p.single.get("stats", {})
    for name in sorted(set(queue_stats) | set(totals)):
        if _num(queue_stats.get(name)) != totals[name]:
            pipe.hset(keys.stats, name, str(totals[name]))
            done.append(f"stats {name} {_shown(queue_stats.get(name))} -> {totals[name]}")
    # the tenants index (first-push order): a tenant with pushes missing from it (a damaged
    # index was deleted in step 1) enters at the end; a push adds a tenant only once, at its
    # first push, so nothing else ever put it back (it vanished from every listing)
    indexed = {_text(member) for member, _ in p.single.get("tenants", [])}
    for tenant, stats in sorted(p.tenant_stats.items()):
        if (_num(stats.get("pushed")) or 0) > 0 and tenant not in indexed:
            pipe.zadd(keys.tenants, {tenant: p.now}, nx=True)
            done.append(f"tenant {tenant} back in the tenants index (at the end of its order)")
    pipe.execute()


def _shown(raw: bytes | str | None) -> str:
    count = _num(raw)
    return repr(_text(raw or b"")) if count is None else str(count)
