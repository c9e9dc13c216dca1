"""``fairque doctor``: the invariants of one queue's Redis structures, read straight from the
server, and the repair of what an outside hand (or a lost write) broke.

:func:`check` reads every key of a queue with a raw ``redis.Redis`` client (one ``SCAN`` for the
key names, then one MULTI/EXEC so the structures are read as one snapshot) and checks them
against each other, following ``fairque_redis/keys.py`` and the Lua scripts:

- every key of the queue is ``fq:{<queue>}:<family>...`` with a family ``keys.py`` defines and
  the Redis type it documents; no key naming the queue lies outside that prefix;
- every id in a structure (``c:<u>``, ``n:<u>``, ``delayed``, ``leases``, ``dlq``) has a live task
  hash, of that tenant (``c``/``n``), appears in exactly one structure and only once;
- a live task hash's state ``st`` matches exactly one structure: queued -> its tenant's
  ``c:<u>`` (priority 6) or ``n:<u>`` (1-5, member = 16-digit seq + id); started -> ``leases``
  (score = ``dl``, token set); scheduled -> ``delayed`` (score = ``due``); failed -> ``dlq``;
  deferred -> none of them and a non-empty ``waits:<id>``; finished / canceled -> none;
- gauges equal the real cardinalities: ``ts:<u>`` ``scheduled`` and ``leased`` per tenant, the
  meta ``ready`` (all ``c:``/``n:`` entries); a tenant is in one ``active:<tier>`` set exactly
  while it has ready tasks, unless it is held out (:func:`held_tenants`: paused, capped at its
  ``max_running`` or parked by its rate, ADRs 28 and 32), and ``tiers`` holds exactly the tiers
  with an active tenant; a paused or capped tenant is in no active set, and a capped one holds
  a lease (the end of a lease is what lets it in again);
- a ``dlq`` score is a whole number of ms; the meta counters (``vtime``, ``seq``, ``ready``,
  ``act``, ...) are numbers; no deferred task waits for parents that have all ended
  (:mod:`fairque_redis.doctor.deps`);
- every queue counter in ``stats`` equals the sum of the tenants' ``ts:<u>`` counters, and every
  tenant with pushes is in the ``tenants`` index.

:func:`repair` (``fairque doctor --repair``, in :mod:`fairque_redis.doctor.repair`) fixes what
it can from the task records. The queue should be quiet while it is read (workers stopped or
idle): a SCAN is not atomic, so a key created during the scan may be missed. One server (on a
cluster, pass the client of the node that owns the queue's slot: :func:`node_client`).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from typing import Any

import attrs
import redis

from fairque_core.domain.limits import QUEUE_PARK_MEMBER
from fairque_redis.doctor.deps import stuck
from fairque_redis.keys import KeySpace, recorded_partitions

__all__ = [
    "Parsed",
    "check",
    "check_parsed",
    "held_tenants",
    "key_space",
    "meta_numbers",
    "node_client",
    "parse",
    "queue_spaces",
    "snapshot",
    "stored_int",
    "whole",
]

#: a queue's name (its one key space) or one key space of it (one partition, ADR 34)
Where = str | KeySpace


def key_space(where: Where) -> KeySpace:
    """``where`` as a key space: a queue's name stands for its one (unpartitioned) key space."""
    return where if isinstance(where, KeySpace) else KeySpace(where)


def queue_spaces(client: Any, queue: str) -> list[KeySpace]:
    """The key spaces holding ``queue``'s tasks: its one slot, or each of its partitions as
    the server records their number (``fq:{<queue>}:partitions``, ADR 34), whatever number
    the caller was configured with."""
    base = KeySpace(queue)
    count = recorded_partitions(client.get(base.partition_count), base.partition_count)
    if count <= 1:
        return [base]
    return [KeySpace(queue, partition=n, partitions=count) for n in range(count)]


#: Redis type of each singleton key (keys.py); a singleton keys.py adds later is accepted with
#: any type until it is listed here.
_SINGLETON_TYPES = {
    "meta": "hash",
    "stats": "hash",
    "tiers": "zset",
    "delayed": "zset",
    "leases": "zset",
    "dlq": "zset",
    "wake": "list",
    "sched": "list",
    "tenants": "zset",
    "parked": "zset",
    "intake": "list",
    "intake_bad": "list",
    "events": "stream",
}
#: KeySpace builder -> Redis type, for the families that end with an id.
_FAMILY_BUILDERS = {
    "task": "hash",
    "waits": "set",
    "children": "list",
    "critical": "list",
    "normal": "zset",
    "tenant": "hash",
    "tenant_stats": "hash",
    "active": "zset",
    # results (ADR 27): end notification, XCom values, unique-key holders
    "done": "list",
    "xcom": "hash",
    "unique": "string",
    # the browse indexes (ADR 70)
    "index": "zset",
}
#: builders that take more than one argument (tenant, then id or key)
_BUILDER_ARITY = {"xcom": 2, "unique": 2}
#: Per-tenant gauges: in ts:<u> but not summed into stats.
_TENANT_GAUGES = ("scheduled", "leased")
_OTHER_QUEUE = re.compile(rb"^fq:\{[^}]*\}:")
_SEQ_DIGITS = 16


def _families(keys: KeySpace) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """(singleton suffix -> type, family word -> (builder, type)) spelled by ``keys``."""
    singletons: dict[str, str] = {}
    for name in dir(KeySpace):
        attr = getattr(KeySpace, name)
        if isinstance(attr, property) and name not in ("prefix", "queue", "tag", "partition"):
            value = getattr(keys, name)
            if isinstance(value, str) and value.startswith(keys.prefix):
                singletons[value[len(keys.prefix) :]] = _SINGLETON_TYPES.get(name, "*")
    families: dict[str, tuple[str, str]] = {}
    for builder, kind in _FAMILY_BUILDERS.items():
        make = getattr(keys, builder, None)
        if make is None:  # a family this version of keys.py does not have
            continue
        args = (0,) if builder == "active" else ("X",) * _BUILDER_ARITY.get(builder, 1)
        family = make(*args)[len(keys.prefix) :].split(":", 1)[0]
        families[family] = (builder, kind)
    return singletons, families


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def snapshot(client: Any, queue: Where) -> dict[str, Any]:
    """Every key of ``queue`` (a queue's name, or one partition's key space) with its type and
    contents, read in one MULTI/EXEC.

    Returns ``{"now": server ms, "keys": {suffix: (type, value)}, "stray": [key, ...]}`` where a
    hash is a ``dict[str, bytes]``, a zset a ``list[(member str, score float)]``, a list a
    ``list[str]`` and a set a ``set[str]``.
    """
    keys = key_space(queue)
    prefix = keys.prefix.encode()
    found: list[bytes] = []
    stray: list[str] = []
    for key in client.scan_iter(match=f"*{keys.tag}*", count=1000):
        if key.startswith(prefix):
            found.append(key)
        elif not _OTHER_QUEUE.match(key):
            stray.append(_text(key))
    types_pipe = client.pipeline(transaction=False)
    for key in found:
        types_pipe.type(key)
    types = [_text(t) for t in types_pipe.execute()]

    def read(transaction: bool) -> list[Any]:
        pipe = client.pipeline(transaction=transaction)
        pipe.time()
        for key, kind in zip(found, types, strict=True):
            if kind == "hash":
                pipe.hgetall(key)
            elif kind == "zset":
                pipe.zrange(key, 0, -1, withscores=True)
            elif kind == "list":
                pipe.lrange(key, 0, -1)
            elif kind == "set":
                pipe.smembers(key)
            else:
                pipe.type(key)
        return list(pipe.execute())

    try:
        replies = read(transaction=True)
    except redis.OutOfMemoryError:
        # a server at maxmemory refuses MULTI: read without it (the queue is quiet)
        replies = read(transaction=False)
    seconds, micros = replies[0]
    contents: dict[str, tuple[str, Any]] = {}
    for key, kind, reply in zip(found, types, replies[1:], strict=True):
        if kind == "none" or _text(reply) == "none":
            continue  # expired (or deleted) between the SCAN and the read
        suffix = _text(key)[len(keys.prefix) :]
        value: Any = reply
        if kind == "hash":
            value = {_text(k): v for k, v in reply.items()}
        elif kind == "zset":
            value = [(_text(m), float(s)) for m, s in reply]
        elif kind == "list":  # an intake entry's body may be any bytes (ADR 47)
            value = [v.decode("utf-8", "surrogateescape") for v in reply]
        elif kind == "set":
            value = {_text(v) for v in reply}
        contents[suffix] = (kind, value)
    return {"now": int(seconds) * 1000 + int(micros) // 1000, "keys": contents, "stray": stray}


#: What a field that is not a number reads as: no count, score or priority is negative, so it
#: never matches the real value and is reported (it raised a bare ValueError: the doctor
#: crashed on the very damage it is for, while every claim failed on it).
_NOT_A_NUMBER = -1


def stored_int(raw: bytes | str) -> int | None:
    """A stored numeric field as an int; None when it is not a number ("lots", "nan")."""
    try:
        return int(float(_text(raw)))
    except (ValueError, OverflowError):
        return None


def whole(score: float) -> bool:
    """A sorted-set score that is a whole, finite number (of ms: ``delayed``, ``leases``,
    ``dlq``)."""
    return math.isfinite(score) and score == int(score)


#: meta fields every push and claim reads as numbers (core.lua fq_meta; limits.lua the GCRA
#: state), besides each tier's ``vtime:<tier>``
_META_NUMBERS = ("vtime", "seq", "ready", "act", "qtat", "qhold")


def meta_numbers(meta: dict[str, bytes]) -> list[str]:
    """The numeric fields present in a meta hash."""
    return [name for name in meta if name in _META_NUMBERS or name.startswith("vtime:")]


def _int(raw: bytes | str | None, default: int = 0) -> int:
    if raw is None or raw in (b"", ""):
        return default
    value = stored_int(raw)
    return _NOT_A_NUMBER if value is None else value


@attrs.define
class Parsed:
    """A snapshot sorted by family (keys of the right type only; the others in ``damaged``)."""

    now: int
    bad: list[str]
    #: (key suffix, its type, the type keys.py says) of every key of the wrong type
    damaged: list[tuple[str, str, str]] = attrs.Factory(list)
    tasks: dict[str, dict[str, bytes]] = attrs.Factory(dict)
    waits: dict[str, set[str]] = attrs.Factory(dict)
    #: parent id -> the ids of its children:<parent> list
    children: dict[str, list[str]] = attrs.Factory(dict)
    critical: dict[str, list[str]] = attrs.Factory(dict)
    normal: dict[str, list[tuple[str, float]]] = attrs.Factory(dict)
    tenant: dict[str, dict[str, bytes]] = attrs.Factory(dict)
    tenant_stats: dict[str, dict[str, bytes]] = attrs.Factory(dict)
    #: tier -> [(tenant, score)]; raw_active: tier -> [(member, score)]
    active: dict[str, list[tuple[str, float]]] = attrs.Factory(dict)
    raw_active: dict[str, list[tuple[str, float]]] = attrs.Factory(dict)
    single: dict[str, Any] = attrs.Factory(dict)

    def live(self, task_id: str) -> dict[str, bytes] | None:
        """The task hash of ``task_id`` if it is live (has a state, not past its expiry)."""
        rec = self.tasks.get(task_id)
        if rec is None or "st" not in rec:
            return None
        exp = rec.get("exp")
        if exp is not None and _int(exp) <= self.now:
            return None
        return rec


def parse(snap: dict[str, Any], queue: Where) -> Parsed:
    """Sort a :func:`snapshot` of ``queue`` by family; keys of a wrong type go to ``damaged``."""
    keys = key_space(queue)
    singletons, families = _families(keys)
    out = Parsed(
        now=snap["now"],
        bad=[
            f"key {key!r} names the queue but lies outside {keys.prefix!r}" for key in snap["stray"]
        ],
    )
    for suffix, (kind, value) in snap["keys"].items():
        if suffix in singletons:
            want = singletons[suffix]
            if want not in ("*", kind):
                out.bad.append(f"key {suffix!r} is a {kind}, keys.py says {want}")
                out.damaged.append((suffix, kind, want))
                continue
            out.single[suffix] = value
            continue
        family, sep, ident = suffix.partition(":")
        if not sep or family not in families or not ident:
            out.bad.append(f"key {keys.prefix}{suffix!r} is not a family keys.py defines")
            continue
        builder, want = families[family]
        if kind != want:
            out.bad.append(f"key {suffix!r} is a {kind}, keys.py says {want}")
            out.damaged.append((suffix, kind, want))
            continue
        if builder == "task":
            out.tasks[ident] = value
        elif builder == "waits":
            out.waits[ident] = value
        elif builder == "children":
            out.children[ident] = [_text(v) for v in value]
        elif builder == "critical":
            out.critical[ident] = value
        elif builder == "normal":
            out.normal[ident] = value
        elif builder == "tenant":
            out.tenant[ident] = value
        elif builder == "tenant_stats":
            out.tenant_stats[ident] = value
        elif builder == "active":
            # members are <activation number>|<tenant> (a bare tenant id in older data)
            out.raw_active[ident] = list(value)
            out.active[ident] = [(member.rpartition("|")[2], score) for member, score in value]
    return out


def node_client(client: Any, queue: Where) -> Any:
    """The plain client of the node holding ``queue``'s keys (``client`` itself if not a
    cluster client): the keys of a queue (or of one of its partitions) share one hash slot."""
    if hasattr(client, "get_node_from_key"):
        node = client.get_node_from_key(key_space(queue).meta)
        return node.redis_connection or client.get_redis_connection(node)
    return client


def held_tenants(parsed: Parsed) -> dict[str, str]:
    """Tenants a limit or a pause legitimately keeps out of their active set, with the reason:
    ``paused`` (tenant hash ``pau``, pause.lua), ``capped`` (``capd``: at its ``max_running``),
    ``parked`` (in the ``parked`` zset: waiting for its rate's next start; the claim's due-move
    step lets it in again). A parked tenant whose time has come may already be active again."""
    held: dict[str, str] = {}
    for tenant, record in parsed.tenant.items():
        if _text(record.get("pau", b"")) == "1":
            held[tenant] = "paused"
        elif _text(record.get("capd", b"")) == "1":
            held[tenant] = "capped"
    for member, _ in parsed.single.get("parked", []):
        if member != QUEUE_PARK_MEMBER:
            held.setdefault(member, "parked")
    return held


def check(client: Any, queue: Where) -> list[str]:
    """Every broken invariant of ``queue`` (a queue's name, or one partition's key space: see
    :func:`queue_spaces`) as a sentence; ``[]`` when it is consistent."""
    return check_parsed(parse(snapshot(node_client(client, queue), queue), queue))


def check_parsed(parsed: Parsed) -> list[str]:
    """:func:`check` of a :func:`parse` result."""
    p = parsed
    bad, tasks, waits = list(p.bad), p.tasks, p.waits
    critical, normal, tenant_stats, active, single = (
        p.critical,
        p.normal,
        p.tenant_stats,
        p.active,
        p.single,
    )
    live = p.live
    if single.get("intake:bad"):  # kept raw by an ingest (ADR 47): an operator's to look at
        bad.append(
            f"{len(single['intake:bad'])} intake entries set aside in intake:bad (unreadable, "
            "or their task id held by a live task of another tenant: ADR 60)"
        )

    # where each id is: (structure, tenant or "", score or None)
    places: dict[str, list[tuple[str, float | None]]] = defaultdict(list)
    for tenant, ids in critical.items():
        for task_id in ids:
            places[task_id].append((f"c:{tenant}", None))
    for tenant, members in normal.items():
        for member, score in members:
            task_id = member[_SEQ_DIGITS:]
            places[task_id].append((f"n:{tenant}", score))
            rec = live(task_id)
            if rec is not None and member[:_SEQ_DIGITS] != f"{_int(rec.get('seq')):016d}":
                bad.append(f"task {task_id}: n:{tenant} member {member!r} does not carry its seq")
    for name in ("delayed", "leases", "dlq"):
        for task_id, score in single.get(name, []):
            places[task_id].append((name, score))
    for task_id, score in single.get("dlq", []):
        if not whole(score):  # ZADD dlq 1.5 <id>: every listing read it as a time in ms
            bad.append(f"dlq entry {task_id}: score {score!r} is not a whole number of ms")

    for task_id, spots in sorted(places.items()):
        names = [name for name, _ in spots]
        if len(spots) > 1:
            bad.append(f"task {task_id} is in {len(spots)} structures: {names}")
        rec = live(task_id)
        if rec is None:
            bad.append(f"task {task_id} is in {names} but has no live task hash")
            continue
        tenant = _text(rec.get("u", b""))
        for name in names:
            if name.startswith(("c:", "n:")) and name[2:] != tenant:
                bad.append(f"task {task_id} of tenant {tenant!r} is in {name}")

    # each live record's state against where it is
    ready_of: Counter[str] = Counter()
    scheduled_of: Counter[str] = Counter()
    leased_of: Counter[str] = Counter()
    for task_id in sorted(tasks):
        rec = live(task_id)
        if rec is None:
            continue
        state = _text(rec["st"])
        tenant = _text(rec.get("u", b""))
        prio = _int(rec.get("p"), -1)
        where = [name for name, _ in places.get(task_id, [])]
        scores: dict[str, float | None] = dict(places.get(task_id, []))
        if not tenant or prio < 1 or prio > 6 or "seq" not in rec:
            bad.append(f"task {task_id}: hash lacks u/p/seq or has priority {prio}")
        if state == "queued":
            want = f"c:{tenant}" if prio == 6 else f"n:{tenant}"
            if where != [want]:
                bad.append(f"task {task_id} is queued but is in {where}, not [{want!r}]")
            ready_of[tenant] += 1
        elif state == "started":
            if where != ["leases"]:
                bad.append(f"task {task_id} is started but is in {where}, not ['leases']")
            elif scores["leases"] != _int(rec.get("dl"), -1):
                dl = _text(rec.get("dl", b""))
                bad.append(f"task {task_id}: lease score {scores['leases']} != dl {dl}")
            if not rec.get("tok"):
                bad.append(f"task {task_id} is started without a lease token")
            leased_of[tenant] += 1
        elif state == "scheduled":
            if where != ["delayed"]:
                bad.append(f"task {task_id} is scheduled but is in {where}, not ['delayed']")
            elif scores["delayed"] != _int(rec.get("due"), -1):
                bad.append(f"task {task_id}: delayed score {scores['delayed']} != due")
            scheduled_of[tenant] += 1
        elif state == "failed":
            if where != ["dlq"]:
                bad.append(f"task {task_id} is failed but is in {where}, not ['dlq']")
        elif state == "deferred":
            if where:
                bad.append(f"task {task_id} is deferred but is in {where}")
            if not waits.get(task_id):
                bad.append(f"task {task_id} is deferred with no waits:{task_id}")
            for parent in sorted(_text(w) for w in waits.get(task_id, ())):
                # the parent's end releases the children of its list: one missing from it
                # (a damaged children: key deleted) would wait for ever
                if task_id not in p.children.get(parent, ()):
                    bad.append(f"task {task_id} waits for {parent} but is not in its children")
        elif state in ("finished", "canceled"):
            if where:
                bad.append(f"task {task_id} is {state} but is in {where}")
        else:
            bad.append(f"task {task_id} has unknown state {state!r}")
        if state not in ("deferred", "canceled") and waits.get(task_id):
            bad.append(f"task {task_id} is {state} but waits:{task_id} is not empty")

    bad += stuck(p)  # deferred for ever: every task it waits for has ended

    # gauges against the real cardinalities
    tenants = set(critical) | set(normal) | set(tenant_stats)
    tenants |= {_text(rec.get("u", b"")) for rec in tasks.values() if rec.get("u")}
    held = held_tenants(p)
    tenants |= set(held)
    in_ready = 0
    for tenant in sorted(tenants):
        ready = len(critical.get(tenant, [])) + len(normal.get(tenant, []))
        in_ready += ready
        if ready != ready_of[tenant]:
            bad.append(f"tenant {tenant}: {ready} ids in c:/n: but {ready_of[tenant]} queued tasks")
        gauges = tenant_stats.get(tenant, {})
        for name, real in (("scheduled", scheduled_of[tenant]), ("leased", leased_of[tenant])):
            if _int(gauges.get(name)) != real:
                bad.append(f"tenant {tenant}: ts {name} = {_int(gauges.get(name))}, real {real}")
        memberships = [tier for tier, members in active.items() if tenant in dict(members)]
        hold = held.get(tenant)
        if hold in ("paused", "capped") and memberships:
            bad.append(f"tenant {tenant} is {hold} but is in active:{memberships}")
        elif not ready and memberships:
            bad.append(f"tenant {tenant} has no ready task but is in active:{memberships}")
        elif len(memberships) > 1 or (ready and not hold and not memberships):
            # a held tenant may be out (a parked one whose time came may be back in already)
            bad.append(f"tenant {tenant} has {ready} ready tasks but is in active:{memberships}")
        if hold == "capped" and not leased_of[tenant]:
            bad.append(f"tenant {tenant} is capped but holds no lease: nothing will let it in")
        if _int(gauges.get("pushed")) > 0 and tenant not in dict(single.get("tenants", [])):
            bad.append(f"tenant {tenant} has pushed tasks but is not in the tenants index")
    meta = single.get("meta", {})
    for name in meta_numbers(meta):
        if stored_int(meta[name]) is None:  # every push and claim reads them
            bad.append(f"meta {name} = {_text(meta[name])[:40]!r} is not a number")
    if _int(meta.get("ready")) != in_ready:
        bad.append(f"meta ready = {_int(meta.get('ready'))}, real {in_ready}")
    live_tiers = {tier for tier, members in active.items() if members}
    tiers = {member for member, _ in single.get("tiers", [])}
    if tiers != live_tiers:
        bad.append(f"tiers = {sorted(tiers)}, active tiers are {sorted(live_tiers)}")

    # queue counters = the sum of the tenants' counters
    stats = single.get("stats", {})
    totals: Counter[str] = Counter()
    for gauges in tenant_stats.values():
        for name, value in gauges.items():
            if name not in _TENANT_GAUGES:
                totals[name] += _int(value)
    for name in sorted(set(stats) | set(totals)):
        if _int(stats.get(name)) != totals[name]:
            bad.append(f"stats {name} = {_int(stats.get(name))}, tenants sum {totals[name]}")
    return bad
