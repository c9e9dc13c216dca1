"""``fairque push``, ``fairque stats`` and ``fairque dlq``: small operations on a live queue."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from fairque_cli.checks import non_negative_float, non_negative_int, positive_float, positive_int
from fairque_cli.context import (
    CliError,
    SubCommands,
    UsageError,
    add_tenant_flag,
    config_tenants,
    describe_target,
    load_config,
    open_queue,
    split_ids,
)
from fairque_cli.fairness_cmd import run_tenant_fairness
from fairque_cli.term import LiveView, bold, format_table
from fairque_core import FailureType, Priority, Task, TaskState
from fairque_core.app.engine.queue import FairQueue
from fairque_core.domain.validation import MAX_EPOCH_SECONDS, MAX_TENANT_PAGE, is_digits

__all__ = ["add_dlq", "add_push", "add_stats", "parse_priority"]

_SIZE_COLUMNS = ("critical", "normal", "scheduled", "leased", "total")


# ---- push ------------------------------------------------------------------------------------


def parse_priority(text: str) -> Priority:
    """A priority from ``1``-``6`` or a name (``high``, ``VERY_LOW``, ``critical``): the
    ``type`` of ``--priority``, so a bad one is a usage error (exit 2)."""
    value = text.strip()
    if is_digits(value.lstrip("-")):
        try:
            return Priority.from_int(int(value))
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be 1-6 or a name, got {text!r}") from None
    try:
        return Priority[value.upper().replace("-", "_")]
    except KeyError:
        names = ", ".join(p.name.lower() for p in Priority)
        raise argparse.ArgumentTypeError(f"must be 1-6 or one of {names}; got {text!r}") from None


def _parse_payload(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"--payload is not valid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(value, dict):
        raise CliError(f"--payload must be a JSON object, got {type(value).__name__}")
    return value


def _run_push(args: argparse.Namespace, out: TextIO) -> int:
    priority: Priority = args.priority
    payload = _parse_payload(args.payload)
    if args.delay is not None and args.delay < 0:
        raise CliError("--delay must be >= 0 seconds")
    execute_after = time.time() + args.delay if args.delay else None
    if execute_after is not None and execute_after > MAX_EPOCH_SECONDS:
        raise CliError("--delay must end before the year 9999")
    task = Task.create(
        args.tenant,
        priority,
        payload,
        task_id=args.id,
        max_retries=args.max_retries,
        execute_after=execute_after,
        name=args.name or "",
    )
    config = load_config(args)
    with open_queue(config) as queue:
        task_id = queue.push(task)
        state = queue.get_state(task_id)
    out.write(f"{task_id}\n")
    if not args.quiet:
        sys.stderr.write(
            f"pushed {task_id} for {args.tenant} (priority {priority.name.lower()}, "
            f"{state if state is not None else 'unknown'}) to queue {config.queue.name}\n"
        )
    return 0


def add_push(sub: SubCommands) -> None:
    p = sub.add_parser(
        "push",
        help="push one task",
        description="Push one task for a tenant; prints its id on stdout.",
    )
    add_tenant_flag(p, many=False, required=True, help="tenant id")
    p.add_argument(
        "--priority",
        type=parse_priority,
        default="normal",
        help="1-6 or very_low|low|normal|high|very_high|critical",
    )
    p.add_argument("--payload", default="{}", help="task payload, a JSON object")
    p.add_argument("--name", default="", help="task name (what a registry handler dispatches on)")
    p.add_argument(
        "--delay", type=non_negative_float, default=None, metavar="S", help="run after S seconds"
    )
    p.add_argument("--id", default=None, help="task id (pushing a known id is a no-op)")
    p.add_argument("--max-retries", type=non_negative_int, default=3, metavar="N")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the task id")
    p.set_defaults(func=_run_push)


# ---- stats -----------------------------------------------------------------------------------


def _ready(size: Mapping[str, int]) -> int:
    return size.get("critical", 0) + size.get("normal", 0)


def _busiest_tenants(
    queue: FairQueue, limit: int
) -> tuple[list[str], int, dict[str, dict[str, int]]]:
    """The ``limit`` tenants with the most ready tasks among all the queue has seen (ties in
    first-push order), the number of tenants, and the depths of the chosen ones.

    Reads every tenant's depths: one ``list_tenants`` and one ``queue_sizes`` call per 1000
    tenants.
    """
    seen: dict[str, None] = {}
    total = 0
    while True:
        page, total = queue.list_tenants(limit=MAX_TENANT_PAGE, offset=len(seen))
        seen.update(dict.fromkeys(page))
        if not page or len(seen) >= total:
            break
    tenants = list(seen)
    sizes: dict[str, dict[str, int]] = {}
    for start in range(0, len(tenants), MAX_TENANT_PAGE):
        sizes.update(queue.get_queue_sizes_batch(tenants[start : start + MAX_TENANT_PAGE]))
    ranked = sorted(tenants, key=lambda t: -_ready(sizes[t]))[:limit]
    return ranked, max(total, len(tenants)), {t: sizes[t] for t in ranked}


def _stats_lines(
    queue: FairQueue,
    target: str,
    named: Sequence[str],
    styled: bool,
    *,
    limit: int = 20,
    source: str = "user",
) -> tuple[list[str], dict[str, Any]]:
    """The text and the JSON of ``fairque stats``: the ``named`` tenants, or (none named)
    the ``limit`` tenants of the queue with the most ready tasks."""
    stats = queue.get_stats()
    if named:
        tenants = list(named)
        sizes = queue.get_queue_sizes_batch(tenants)
        total = queue.list_tenants(limit=0)[1]
    else:
        tenants, total, sizes = _busiest_tenants(queue, limit)
        source = "queue"
    tenant_counters = {t: queue.get_tenant_stats(t) for t in tenants}
    # why a limit holds a tenant's ready work now (ADR 67): read-only, 1000 tenants a call
    held: dict[str, str] = {}
    for start in range(0, len(tenants), MAX_TENANT_PAGE):
        page = tenants[start : start + MAX_TENANT_PAGE]
        held.update({f.tenant: f.limited_reason for f in queue.get_tenant_fairness(page)})
    per_tenant: dict[str, Any] = {}
    data: dict[str, Any] = {
        "queue": queue.name,
        "stats": stats,
        "tenants": per_tenant,
        "tenants_total": total,
        "tenants_shown": len(tenants),
        "tenant_source": source,
    }
    lines = [
        bold(f"queue {queue.name}", styled) + f"  on {target}",
        "",
    ]
    keys = sorted(stats)
    pairs = [f"{k} {stats[k]}" for k in keys]
    for start in range(0, len(pairs), 5):
        lines.append("  " + "   ".join(pairs[start : start + 5]))
    lines.append(f"  dead-letter queue: {stats.get('dlq', 0)} entries")
    lines.append("")
    rows = []
    for tenant in tenants:
        size = sizes.get(tenant, {})
        counters = tenant_counters[tenant]
        rows.append(
            [
                tenant,
                *(str(size.get(c, 0)) for c in _SIZE_COLUMNS),
                str(counters.get("pushed", 0)),
                str(counters.get("finished", 0)),
                str(counters.get("dead", 0)),
                held.get(tenant) or "-",
            ]
        )
        per_tenant[tenant] = {
            "sizes": dict(size),
            "counters": dict(counters),
            "limited": held.get(tenant) or None,
        }
    if rows:
        header = ["tenant", *_SIZE_COLUMNS, "pushed", "finished", "dead", "limited"]
        lines += format_table(header, rows, right=range(1, len(header) - 1))
        lines.append("")
    lines.append(_tenant_summary(source, len(tenants), total))
    return lines, data


def _tenant_summary(source: str, shown: int, total: int) -> str:
    plural = "tenant" if total == 1 else "tenants"
    if source != "queue":
        where = "with --tenant" if source == "user" else "in the config"
        return f"the queue has seen {total:,} {plural}; shown: the {shown} named {where}"
    if total == 0:
        return "the queue has no tenants yet (none has pushed a task)"
    if shown == total:
        return f"{total:,} {plural} in the queue, all shown (most ready tasks first)"
    return (
        f"{total:,} tenants in the queue; showing the {shown} with the most ready tasks "
        "(--limit N shows more)"
    )


def _run_stats(args: argparse.Namespace, out: TextIO) -> int:
    if args.tenants:
        return run_tenant_fairness(args, out)
    config = load_config(args)
    named = split_ids(args.tenant)
    source = "user"
    if not named:
        named = config_tenants(config)
        source = "config"
    target = describe_target(config)

    def render(queue: FairQueue, styled: bool) -> tuple[list[str], dict[str, Any]]:
        return _stats_lines(queue, target, named, styled, limit=args.limit, source=source)

    with open_queue(config) as queue:
        if args.json:
            _lines, data = render(queue, False)
            out.write(json.dumps(data, indent=2, default=str) + "\n")
            return 0
        view = LiveView(out, period=args.watch or 2.0, tty_period=args.watch or 1.0)
        if not args.watch:
            lines, _data = render(queue, view.tty)
            view.finish(lines)
            return 0
        try:
            while True:
                lines, _data = render(queue, view.tty)
                stamp = dt.datetime.now().strftime("%H:%M:%S")
                view.update([*lines, "", f"{stamp}  (Ctrl-C to stop)"], force=True)
                time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0


def add_stats(sub: SubCommands) -> None:
    p = sub.add_parser(
        "stats",
        help="queue counters, per-tenant depths, DLQ size",
        description="Show the queue's counters, the DLQ size and per-tenant depths. Tenants come "
        "from --tenant, else from the config (tenant_weights, tenant_tiers, worker lists), else "
        "from the queue itself: the --limit tenants with the most ready tasks.",
    )
    add_tenant_flag(p, many=True, help="tenant(s) to show; repeat or comma-separate")
    p.add_argument(
        "--limit",
        type=positive_int,
        default=20,
        metavar="N",
        help="without --tenant or configured tenants: show at most N tenants (default 20)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument(
        "--watch", type=positive_float, default=None, metavar="S", help="refresh every S seconds"
    )
    p.add_argument(
        "--tenants",
        action="store_true",
        help="per-tenant fairness: lag, dispatches, oldest wait, alarms (sorted by lag; with "
        "--watch also window shares and Jain's index)",
    )
    p.set_defaults(func=_run_stats)


# ---- dlq -------------------------------------------------------------------------------------


def _failure_type(text: str | None) -> FailureType | None:
    if text is None:
        return None
    try:
        return FailureType(text.lower())
    except ValueError:
        names = ", ".join(t.value for t in FailureType)
        raise CliError(f"--type must be one of {names}; got {text!r}") from None


def _short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _indented(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines() or [""])


def _entry_row(entry: Any, width: int = 60) -> list[str]:
    task = entry.original_task
    moved = dt.datetime.fromtimestamp(entry.moved_at).strftime("%Y-%m-%d %H:%M:%S")
    return [
        entry.entry_id,
        task.tenant,
        task.name or "-",
        str(entry.failure_type),
        str(task.retry_count),
        moved,
        _short(entry.reason or "", width) if width else entry.reason or "",
    ]


def _selected_ids(queue: FairQueue, args: argparse.Namespace) -> list[str] | None:
    """The DLQ entries to act on: ``--id`` values (checked), a ``--type``, or None for all."""
    ids = split_ids(args.id)
    kind = _failure_type(args.type)
    if ids:
        missing = [i for i in ids if queue.get_state(i) is not TaskState.FAILED]
        if missing:
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise CliError(f"not in the dead-letter queue: {shown} (nothing was changed)")
        if kind is not None:
            wrong = [
                e.entry_id
                for e in _all_entries(queue, None)
                if e.entry_id in ids and e.failure_type is not kind
            ]
            if wrong:
                raise CliError(f"not of type {kind}: {', '.join(wrong[:5])} (nothing was changed)")
        return ids
    if kind is not None:
        return [e.entry_id for e in _all_entries(queue, kind)]
    return None  # --all (_run_dlq checked that one of the three was given)


def _all_entries(queue: FairQueue, kind: FailureType | None) -> list[Any]:
    out: list[Any] = []
    page = 500
    while True:
        chunk = queue.list_dlq(limit=page, offset=len(out), failure_type=kind)
        out.extend(chunk)
        if len(chunk) < page:
            return out


def _run_dlq(args: argparse.Namespace, out: TextIO) -> int:
    if args.action != "list":  # flags that do not go together: a usage error (exit 2)
        if args.all and (args.id or args.type):
            raise UsageError("--all takes every entry: drop --id/--type, or drop --all")
        if not (args.all or args.id or args.type):
            raise UsageError(
                f"name entries with --id or --type, or pass --all to {args.action} them all"
            )
    config = load_config(args)
    with open_queue(config) as queue:
        if args.action == "list":
            kind = _failure_type(args.type)
            wanted = set(split_ids(args.id))
            if wanted:  # looked up among every entry, not in one page of them
                entries = [e for e in _all_entries(queue, kind) if e.entry_id in wanted]
            else:
                entries = queue.list_dlq(limit=args.limit, offset=args.offset, failure_type=kind)
            if args.json:
                out.write(json.dumps([_entry_json(e) for e in entries], indent=2) + "\n")
                return 0
            if not entries:
                what = f" of type {kind}" if kind is not None else ""
                out.write(f"the dead-letter queue of {queue.name} has no entries{what}\n")
                return 0
            header = ["entry id", "tenant", "name", "type", "retries", "moved at", "reason"]
            full = args.full or bool(wanted)
            if full:
                for entry in entries:
                    rows = [_entry_row(entry, width=0)[:-1]]
                    out.write("\n".join(format_table(header[:-1], rows)) + "\n")
                    out.write(f"reason:\n{_indented(entry.reason or '-')}\n\n")
                return 0
            out.write("\n".join(format_table(header, [_entry_row(e) for e in entries])) + "\n")
            return 0
        ids = _selected_ids(queue, args)
        if ids is not None and not ids:
            out.write("nothing to do: no matching entries\n")
            return 0
        if args.action == "requeue":
            count = queue.requeue_dlq(ids)
            out.write(f"requeued {count} entr{'y' if count == 1 else 'ies'}\n")
        else:
            count = queue.purge_dlq(ids)
            out.write(f"purged {count} entr{'y' if count == 1 else 'ies'}\n")
        return 0


def _entry_json(entry: Any) -> Mapping[str, Any]:
    task = entry.original_task
    return {
        "entry_id": entry.entry_id,
        "tenant": task.tenant,
        "name": task.name,
        "priority": int(task.priority),
        "failure_type": str(entry.failure_type),
        "reason": entry.reason,
        "retry_count": task.retry_count,
        "moved_at": entry.moved_at,
    }


def add_dlq(sub: SubCommands) -> None:
    p = sub.add_parser(
        "dlq",
        help="list, requeue or purge dead-letter entries",
        description="Inspect and repair the dead-letter queue. requeue/purge act on the --id "
        "entries, on every entry of a --type, or on everything with --all. "
        "`fairque dlq ACTION --help` shows one action's options.",
    )
    inner = p.add_subparsers(dest="action", metavar="ACTION")
    inner.required = True
    # the shared --url/--queue/--config flags, also after the action (main._WithParents)
    shared = getattr(sub, "_parent", None)
    parents = [shared] if isinstance(shared, argparse.ArgumentParser) else []
    kinds = [t.value for t in FailureType]
    lst = inner.add_parser(
        "list",
        help="a page of entries (or the --id ones)",
        description="List dead-letter entries, a page at a time: id, tenant, name, type, "
        "retries, time moved, reason (cut at 60 characters; --full or --id shows it whole).",
        parents=parents,
    )
    lst.add_argument("--type", choices=kinds, default=None, help="only entries of this type")
    lst.add_argument("--id", action="append", help="entry id(s); repeat or comma-separate")
    lst.add_argument("--limit", type=positive_int, default=100, metavar="N", help="at most N")
    lst.add_argument("--offset", type=non_negative_int, default=0, metavar="N", help="skip N")
    lst.add_argument("--json", action="store_true", help="print JSON")
    lst.add_argument(
        "--full",
        action="store_true",
        help="show each whole reason below its row (also the default with --id)",
    )
    verbs = {
        "requeue": "put entries back in their tenant's queue with a fresh retry budget",
        "purge": "delete entries for good",
    }
    for action, text in verbs.items():
        q = inner.add_parser(
            action,
            help=text,
            description=f"{text[0].upper()}{text[1:]}: the --id entries (each checked first: "
            "one not in the dead-letter queue fails the command and nothing changes), every "
            "entry of a --type, or every entry with --all.",
            parents=parents,
        )
        q.add_argument("--id", action="append", help="entry id(s); repeat or comma-separate")
        q.add_argument("--type", choices=kinds, default=None, help="every entry of this type")
        q.add_argument("--all", action="store_true", help=f"{action} every entry")
        q.set_defaults(usage_prog=q.prog)
    lst.set_defaults(usage_prog=lst.prog)
    p.set_defaults(func=_run_dlq)
