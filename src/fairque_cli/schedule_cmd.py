"""``fairque scheduler`` (the cron ticker) and ``fairque schedule add|rm|ls``.

Schedules live on the server with the queue; any number of ``fairque scheduler`` processes
may run, the scheduler lock and the per-tick task ids make each tick fire once (ADR 24). The
scheduler first stores the config file's ``schedules:`` section (created or replaced).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from datetime import datetime, timezone
from types import FrameType
from typing import Any, TextIO

from fairque_cli.checks import non_negative_float, non_negative_int, positive_float
from fairque_cli.commands import parse_priority
from fairque_cli.context import CliError, SubCommands, load_config, open_queue
from fairque_core.app.scheduler.scheduler import Scheduler
from fairque_core.domain.schedules import Misfire, ScheduleInfo

__all__ = ["add_schedule", "add_scheduler"]


def _when(at: float | None) -> str:
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _info_dict(info: ScheduleInfo) -> dict[str, Any]:
    data = info.schedule.as_dict()
    data.update(added_at=info.added_at, last_fired=info.last_fired, next_at=info.next_at)
    return data


# ---------------------------------------------------------------------- fairque scheduler


def _run_scheduler(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    with open_queue(config) as queue:
        scheduler = Scheduler(  # its settings checked before the config's schedules are saved
            queue,
            lock_seconds=args.lock_seconds,
            poll_seconds=args.poll,
            misfire_grace=args.grace,
        )
        for schedule in config.schedule_values():
            queue.save_schedule(schedule)

        def stop(_signum: int, _frame: FrameType | None) -> None:
            scheduler.stop()

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        names = ", ".join(info.name for info in queue.list_schedules()) or "none yet"
        sys.stderr.write(
            f"fairque scheduler {scheduler.token} on queue {config.queue.name} "
            f"(schedules: {names}); Ctrl-C stops it\n"
        )
        try:
            scheduler.run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    out.write(f"scheduler stopped; {scheduler.fired} ticks pushed\n")
    return 0


def add_scheduler(sub: SubCommands) -> None:
    p = sub.add_parser(
        "scheduler",
        help="run the cron ticker: fire the queue's schedules (run any number of them)",
        description="Fire the queue's cron schedules. Any number may run: one holds the "
        "scheduler lock and fires, the others stand by and take over when it dies.",
    )
    p.add_argument(
        "--lock-seconds", type=positive_float, default=10.0, help="lock lease (default 10)"
    )
    p.add_argument(
        "--poll", type=positive_float, default=1.0, help="seconds between rounds (default 1)"
    )
    p.add_argument(
        "--grace",
        type=non_negative_float,
        default=30.0,
        help="how late a tick may fire and still be on time (default 30 s)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log lock changes")
    p.set_defaults(func=_run_scheduler)


# ---------------------------------------------------------------------- fairque schedule


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _add(args: argparse.Namespace, out: TextIO) -> int:
    try:  # NaN and Infinity are no JSON (json.loads takes them)
        payload = json.loads(args.payload, parse_constant=_no_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise CliError(f"--payload is not JSON: {exc}") from None
    template = {
        "tenant": args.tenant,
        "task_name": args.task_name,
        "priority": args.priority,
        "payload": payload,
        "max_retries": args.max_retries,
    }
    config = load_config(args)
    with open_queue(config) as queue:
        schedule = queue.add_schedule(
            args.name,
            args.cron,
            template,
            timezone=args.timezone,
            misfire=args.misfire,
            jitter=args.jitter,
        )
    out.write(f"{schedule.name}\n")
    return 0


def _rm(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args)
    with open_queue(config) as queue:
        removed = queue.remove_schedule(args.name)
    if not removed:
        raise CliError(f"no schedule named {args.name!r} on queue {config.queue.name}")
    out.write(f"removed {args.name}\n")
    return 0


def _ls(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args)
    with open_queue(config) as queue:
        infos = queue.list_schedules()
    if args.json:
        out.write(json.dumps([_info_dict(i) for i in infos], indent=2) + "\n")
        return 0
    if not infos:
        out.write(f"no schedules on queue {config.queue.name}\n")
        return 0
    for info in infos:
        s = info.schedule
        out.write(
            f"{s.name}  {s.cron!r} {s.timezone}  tenant={s.template.tenant} "
            f"task={s.template.task_name or '-'}  misfire={s.misfire.value}  "
            f"last={_when(info.last_fired)}  next={_when(info.next_at)}\n"
        )
    return 0


def add_schedule(sub: SubCommands) -> None:
    p = sub.add_parser("schedule", help="add, remove or list cron schedules")
    inner = p.add_subparsers(dest="schedule_command", metavar="ACTION")
    inner.required = True
    # the shared --url/--queue/--config flags, also after the action (main._WithParents)
    shared = getattr(sub, "_parent", None)
    parents = [shared] if isinstance(shared, argparse.ArgumentParser) else []
    add = inner.add_parser("add", help="create or replace a schedule", parents=parents)
    add.add_argument("name")
    add.add_argument(
        "cron", help="cron expression, e.g. '*/5 * * * *' (a 6th field, last: seconds)"
    )
    add.add_argument("--tenant", required=True, help="the tenant its tasks belong to")
    add.add_argument("--task-name", default="", help="the task name (handler) to run")
    add.add_argument(
        "--priority",
        type=parse_priority,
        default="3",
        help="1-6 or a name such as high (default 3)",
    )
    add.add_argument("--payload", default="{}", help="JSON object (default {})")
    add.add_argument("--max-retries", type=non_negative_int, default=3)
    add.add_argument("--timezone", default="UTC", help="IANA zone (default UTC)")
    add.add_argument("--misfire", choices=[m.value for m in Misfire], default="skip")
    add.add_argument(
        "--jitter", type=non_negative_float, default=0.0, help="max random delay, seconds"
    )
    add.set_defaults(func=_add)
    rm = inner.add_parser("rm", help="remove a schedule", parents=parents)
    rm.add_argument("name")
    rm.set_defaults(func=_rm)
    ls = inner.add_parser(
        "ls", help="list schedules with their last and next tick", parents=parents
    )
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=_ls)
