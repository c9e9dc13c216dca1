"""Operator commands: ``fairque queues``, ``tenants``, ``tenant set-weight|set-tier|apply``,
``purge``, ``task show|cancel`` and ``workers``. Each takes ``--json``.

``pause``/``resume`` are not here yet: claims would have to skip a paused tenant inside the
claim script, which is being reworked; they come with it.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from typing import Any, TextIO

import attrs

from fairque_cli.checks import non_negative_int, tenant_page
from fairque_cli.context import (
    CliError,
    SubCommands,
    UsageError,
    describe_target,
    error_name,
    load_config,
    open_queue,
)
from fairque_cli.key_limits_cmd import limits_line
from fairque_cli.tasks_cmd import show_task, task_json
from fairque_cli.term import format_table
from fairque_core.app.engine.queue import FairQueue
from fairque_core.app.worker.registry import WorkerRegistry
from fairque_core.domain.errors import FairQueueError, RedisConnectionError
from fairque_core.domain.limits import Limits
from fairque_core.domain.scoring import MAX_WEIGHT, MIN_WEIGHT
from fairque_core.domain.validation import MAX_TENANT_PAGE
from fairque_core.ports.workers import gone_after
from fairque_core.settings.config import MAX_TIER_RANK, FairQueueConfig

__all__ = ["add_operator_commands"]


def _dump(out: TextIO, data: Any) -> int:
    out.write(json.dumps(data, indent=2, default=str) + "\n")
    return 0


def _weight_text(weight: float) -> str:
    return f"{weight:.6g}"


# ---- queues ----------------------------------------------------------------------------------


def _queue_row(queue: FairQueue) -> dict[str, Any]:
    stats = queue.get_stats()
    return {
        "queue": queue.name,
        "ready": int(stats.get("ready", 0)),
        "scheduled": int(stats.get("scheduled", 0)),
        "leased": int(stats.get("leased", 0)),
        "dlq": int(stats.get("dlq", 0)),
        "intake": int(stats.get("intake", 0)),
        "active_tenants": int(stats.get("active_tenants", 0)),
        "tenants": queue.list_tenants(limit=0)[1],
    }


def _with_queue(config: FairQueueConfig, name: str) -> FairQueueConfig:
    return attrs.evolve(config, queue=attrs.evolve(config.queue, name=name))


def _run_queues(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args)
    with open_queue(config) as queue:
        names = queue.backend.list_queues()
        rows = []
        for name in names:
            if name == queue.name:
                rows.append(_queue_row(queue))
                continue
            try:
                with open_queue(_with_queue(config, name)) as other:
                    rows.append(_queue_row(other))
            except RedisConnectionError:
                raise
            except FairQueueError as exc:  # one damaged queue: listed as such, not fatal
                rows.append({"queue": name, "error": f"{error_name(exc)}: {exc}"})
    if args.json:
        return _dump(out, rows)
    unreadable = [row for row in rows if "error" in row]
    rows = [row for row in rows if "error" not in row]
    if not rows and not unreadable:
        out.write(
            f"no queues on {describe_target(config)} yet (a queue is listed once it "
            "stores a task, a weight, limits or a pause)\n"
        )
        return 0
    header = ["queue", "intake", "ready", "scheduled", "leased", "dlq", "active tenants", "tenants"]
    table = [[str(row[k]) for k in ("queue", *_QUEUE_COLUMNS)] for row in rows]
    out.write("\n".join(format_table(header, table, right=range(1, len(header)))) + "\n")
    for row in unreadable:
        out.write(f"{row['queue']}: unreadable ({row['error']}); see fairque doctor\n")
    return 0


_QUEUE_COLUMNS = ("intake", "ready", "scheduled", "leased", "dlq", "active_tenants", "tenants")


# ---- tenants ---------------------------------------------------------------------------------


def _run_tenants(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args)
    with open_queue(config) as queue:
        page, total = queue.list_tenants(limit=args.limit, offset=args.offset)
        sizes = queue.get_queue_sizes_batch(page) if page else {}
        weights = queue.get_tenant_weights(page) if page else {}
        own = {tenant: queue.get_tenant_limits(tenant).own for tenant in page}
        # held by a limit now (ADR 67): one read-only call for the page
        held = {f.tenant: f.limited_reason for f in queue.get_tenant_fairness(page)} if page else {}
        keys = queue.list_key_limits()  # the limits by key (ADR 79), shown after the tenants
    rows: list[dict[str, Any]] = []
    for tenant in page:
        weight, tier = weights[tenant]
        size = sizes[tenant]
        rows.append(
            {
                "tenant": tenant,
                "weight": weight,
                "tier": tier,
                "ready": size.get("critical", 0) + size.get("normal", 0),
                "scheduled": size.get("scheduled", 0),
                "leased": size.get("leased", 0),
                # the tenant's own limits (ADR 28; its tier's defaults: fairque limits show)
                "limits": _own_limits(own[tenant]),
                # why its ready work waits: cap, rate, paused, queue_paused (None: it does not)
                "limited": held.get(tenant) or None,
            }
        )
    if args.json:
        data: dict[str, Any] = {"tenants": rows, "total": total, "offset": args.offset}
        if keys:
            data["key_limits"] = {key: limits.as_dict() for key, limits in keys.items()}
        return _dump(out, data)
    key_lines = [f"limit key {key}: {limits_line(limits)}" for key, limits in keys.items()]
    if not rows:
        out.write(f"no tenants at offset {args.offset} ({total} in all)\n")
        out.writelines(line + "\n" for line in key_lines)
        return 0
    header = ["tenant", "weight", "tier", "ready", "scheduled", "leased", "limits", "limited"]
    table = [
        [
            str(r["tenant"]),
            _weight_text(r["weight"]),
            str(r["tier"]),
            str(r["ready"]),
            str(r["scheduled"]),
            str(r["leased"]),
            _limits_cell(r["limits"]),
            str(r["limited"] or "-"),
        ]
        for r in rows
    ]
    out.write("\n".join(format_table(header, table, right=range(1, len(header) - 2))) + "\n")
    end = args.offset + len(rows)
    more = f"; --offset {end} shows the next page" if end < total else ""
    out.write(f"tenants {args.offset + 1}-{end} of {total} (first-push order){more}\n")
    out.writelines(line + "\n" for line in key_lines)
    return 0


def _own_limits(limits: Limits) -> dict[str, float] | None:
    """A tenant's own limits that are set, or None when it has none."""
    return {k: v for k, v in limits.as_dict().items() if v is not None} or None


def _limits_cell(limits: Mapping[str, float] | None) -> str:
    if not limits:
        return "-"
    return " ".join(f"{name}={value:g}" for name, value in limits.items())


def _run_tenant(args: argparse.Namespace, out: TextIO) -> int:
    if args.action == "apply":
        if args.tenant is not None or args.value is not None:  # they were silently ignored
            raise UsageError("tenant apply takes no TENANT or VALUE: it applies the config's")
        with open_queue(load_config(args), apply_tenants=True) as queue:
            table = queue.config.tenant_weight_table()
        if args.json:
            return _dump(out, {t: {"weight": w, "tier": k} for t, (w, k) in table.items()})
        out.write(f"applied the weights and tiers of {len(table)} tenant(s) from the config\n")
        return 0
    if not args.tenant or args.value is None:
        raise UsageError(f"tenant {args.action} needs a TENANT and a VALUE")
    # checked before the server is asked: a bad value is a usage error (exit 2)
    new_weight = _positive_weight(args.value) if args.action == "set-weight" else None
    new_tier = _tier(args.value) if args.action == "set-tier" else None
    with open_queue(load_config(args)) as queue:
        [(weight, tier)] = queue.get_tenant_weights([args.tenant]).values()
        queue.set_tenant_weight(
            args.tenant,
            weight if new_weight is None else new_weight,
            tier=tier if new_tier is None else new_tier,
        )
        [(weight, tier)] = queue.get_tenant_weights([args.tenant]).values()
    if args.json:
        return _dump(out, {"tenant": args.tenant, "weight": weight, "tier": tier})
    out.write(f"tenant {args.tenant}: weight {_weight_text(weight)}, tier {tier}\n")
    return 0


def _positive_weight(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"WEIGHT must be a number, got {text!r}") from None
    if not MIN_WEIGHT <= value <= MAX_WEIGHT:
        raise UsageError(f"WEIGHT must be in [{MIN_WEIGHT:g}, {MAX_WEIGHT:g}], got {text}")
    return value


def _tier(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"TIER must be an integer, got {text!r}") from None
    if not 0 <= value <= MAX_TIER_RANK:
        raise UsageError(f"TIER must be in [0, {MAX_TIER_RANK}], got {value}")
    return value


# ---- purge -----------------------------------------------------------------------------------


def _run_purge(args: argparse.Namespace, out: TextIO) -> int:
    if bool(args.tenant) == bool(args.all):
        raise UsageError("name one --tenant T, or pass --all --yes to purge every tenant")
    if args.all and not args.yes:
        raise UsageError("purge --all cancels every waiting task of the queue: add --yes")
    config = load_config(args)
    with open_queue(config) as queue:
        count = queue.purge_all() if args.all else queue.purge_tenant(args.tenant)
        name = queue.name
    if args.json:
        return _dump(out, {"queue": name, "tenant": args.tenant, "purged": count})
    whose = "every tenant" if args.all else f"tenant {args.tenant}"
    out.write(
        f"purged {count} waiting task{'' if count == 1 else 's'} of {whose} in {name} "
        "(running tasks are left to finish)\n"
    )
    return 0


# ---- task ------------------------------------------------------------------------------------


def _run_task(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args)
    with open_queue(config) as queue:
        if args.action == "show":
            data = task_json(queue, args.task_id)
            if data is None:
                raise CliError(f"no task {args.task_id} in queue {queue.name}")
            if args.json:
                return _dump(out, data)
            show_task(data, out)
            return 0
        canceled = queue.cancel(args.task_id, terminate=args.terminate)
        state = queue.get_state(args.task_id)
    if args.json:
        _dump(
            out,
            {
                "task_id": args.task_id,
                "canceled": canceled,
                "state": None if state is None else str(state),
            },
        )
        return 0 if canceled else 1
    if canceled:
        out.write(f"canceled {args.task_id}\n")
        return 0
    if state is None:
        raise CliError(f"no task {args.task_id} in the queue")
    raise CliError(f"task {args.task_id} is already {state}; nothing changed")


# ---- workers ---------------------------------------------------------------------------------


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def _run_workers(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args)
    with open_queue(config) as queue:
        workers = WorkerRegistry(queue.backend).list()
        name = queue.name
    if args.json:
        return _dump(out, [w.as_dict() for w in workers])
    live = [w for w in workers if not w.stale]
    gone = [w for w in workers if w.stale]
    if not live:
        out.write(f"no live workers on queue {name}\n")
    now = time.time()
    header = [
        "worker", "host", "pid", "queue", "state", "busy", "leased", "processed", "failed",
        "last seen",
    ]  # fmt: skip
    rows = [
        [
            w.worker_id,
            w.host,
            str(w.pid),
            w.queue,
            "gone" if w.stale else w.state,
            f"{w.running}/{w.concurrency}" if w.concurrency else str(w.running),
            str(w.leased),
            str(w.processed),
            str(w.failed),
            _ago(now - w.last_seen),
        ]
        for w in live + gone
    ]
    if rows:
        out.write("\n".join(format_table(header, rows, right=(2, 5, 6, 7, 8))) + "\n")
    if gone:
        longest = max(gone_after(w.interval) for w in gone)
        out.write(
            f"{len(gone)} gone: no heartbeat record for {longest:g} s (3 beat intervals): "
            "dead or cut off from the server\n"
        )
    return 0


# ---- parsers ---------------------------------------------------------------------------------


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")


def add_operator_commands(sub: SubCommands) -> None:
    p = sub.add_parser(
        "queues",
        help="list the queues of the server with their sizes",
        description="List the queues registered on the server (a queue registers itself "
        "before its first write) with intake (not yet ingested), ready, scheduled, leased, "
        "DLQ and tenant counts.",
    )
    _json_flag(p)
    p.set_defaults(func=_run_queues)

    p = sub.add_parser(
        "tenants",
        help="a page of tenants: weight, tier, depth",
        description="List the tenants the queue has seen (first-push order), a page at a "
        "time, with their weight, tier and depth (ready, scheduled, leased) and their own "
        "flow-control limits (max_running, rate, burst, max_queued; '-' when none is set: "
        "fairque limits show TENANT adds its tier's defaults), then the limit keys that have "
        "limits (ADR 79; fairque limits show --key K for what runs and waits under one).",
    )
    p.add_argument(
        "--limit",
        type=tenant_page,
        default=100,
        metavar="N",
        help=f"page size (default 100, at most {MAX_TENANT_PAGE})",
    )
    p.add_argument("--offset", type=non_negative_int, default=0, metavar="N", help="skip N")
    _json_flag(p)
    p.set_defaults(func=_run_tenants)

    p = sub.add_parser(
        "tenant",
        help="set a tenant's weight or tier, or apply the config's",
        description="set-weight TENANT W keeps the tenant's tier; set-tier TENANT N keeps its "
        "weight; apply writes every weight and tier of the config's queue section.",
    )
    p.add_argument("action", choices=("set-weight", "set-tier", "apply"))
    p.add_argument("tenant", nargs="?", metavar="TENANT")
    p.add_argument("value", nargs="?", metavar="VALUE", help="the weight or the tier")
    _json_flag(p)
    p.set_defaults(func=_run_tenant)

    p = sub.add_parser(
        "purge",
        help="cancel a tenant's (or every) waiting task",
        description="Cancel every queued and scheduled task of --tenant T (or of every tenant "
        "with --all --yes) in one atomic step: they become canceled (reason 'purged'), "
        "counted as canceled, with their waiting dependents. Running tasks are left to "
        "finish; the dead-letter queue is untouched (see fairque dlq purge).",
    )
    p.add_argument("--tenant", default=None, metavar="T", help="the tenant to purge")
    p.add_argument("--all", action="store_true", help="purge every tenant (needs --yes)")
    p.add_argument("--yes", action="store_true", help="confirm --all")
    _json_flag(p)
    p.set_defaults(func=_run_purge)

    p = sub.add_parser(
        "task",
        help="show or cancel one task",
        description="show ID prints the task's story: state, tenant, name, payload (or its "
        "size and a preview), times, every kept attempt (worker, times, outcome, traceback) "
        "and result; cancel ID cancels it unless it is finished, failed or canceled (exit 1 "
        "then). A running task's worker learns it at its next heartbeat and stops the handler "
        "(an async one at once, a thread one when it looks at ctx.cancelled); --terminate also "
        "ends the worker process running it under fairque worker --processes (the supervisor "
        "replaces it).",
    )
    p.add_argument("action", choices=("show", "cancel"))
    p.add_argument("task_id", metavar="ID")
    p.add_argument(
        "--terminate",
        action="store_true",
        help="cancel: end the worker process running the task (fairque worker --processes)",
    )
    _json_flag(p)
    p.set_defaults(func=_run_task)

    p = sub.add_parser(
        "workers",
        help="live workers: id, host, pid, queue, state, busy slots, counters, last seen",
        description="List the workers of the queue from their heartbeat records, written "
        "every worker.registry_interval_seconds (default 5 s) by every worker, whether "
        "started by fairque worker or from code. A record not rewritten for 3 intervals "
        "(15 s by default) is gone (the worker died or lost the server) and listed last; "
        "one not rewritten for 60 is deleted. busy: slots running a handler / concurrency; "
        "leased: tasks it holds (running, buffered, being acknowledged).",
    )
    _json_flag(p)
    p.set_defaults(func=_run_workers)
