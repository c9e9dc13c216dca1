"""``fairque task show`` (a task's story) and ``fairque tasks`` (browse the tasks that ended),
ADR 70. Each takes ``--json``."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import Any, TextIO

from fairque_cli.checks import positive_int
from fairque_cli.context import SubCommands, load_config, open_queue
from fairque_cli.term import format_table
from fairque_core.app.engine.queue import FairQueue
from fairque_core.domain.enums import TaskState
from fairque_core.domain.errors import TaskSerializationError
from fairque_core.domain.task_records import LISTED_STATES, MAX_LIST_LIMIT

__all__ = ["add_tasks", "show_task", "task_json"]


def when(seconds: float | None) -> str:
    """An epoch time as UTC ISO text to the millisecond ("-" for None)."""
    if seconds is None:
        return "-"
    stamp = dt.datetime.fromtimestamp(seconds, dt.timezone.utc)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def task_json(queue: FairQueue, task_id: str) -> dict[str, Any] | None:
    """The task's story as plain values (None: no such task). A task whose payload cannot
    be decoded shows its state and why."""
    try:
        record = queue.get_task(task_id)
    except TaskSerializationError as exc:
        state = queue.get_state(task_id)
        if state is None:
            return None
        return {"task_id": task_id, "state": str(state), "undecodable": str(exc)}
    return None if record is None else record.as_dict()


def show_task(data: dict[str, Any], out: TextIO) -> None:
    """``data`` (of :func:`task_json`) as text: one line per field, then each attempt with
    its worker, times, outcome and traceback."""
    attempts = data.pop("attempts", [])
    for key, value in data.items():
        if key in ("created_at", "started_at", "ended_at"):
            text = when(value)
        elif isinstance(value, (dict, list)):
            text = json.dumps(value, default=str)
        elif value is None or value == "":
            continue
        else:
            text = str(value)
        out.write(f"{key:>15}  {text}\n")
    for a in attempts:
        took = a["ended_at"] - a["started_at"]
        out.write(
            f"attempt {a['number']}: {a['outcome']} on worker {a['worker_id'] or '-'}, "
            f"{when(a['started_at'])} -> {when(a['ended_at'])} ({took:.3f} s)\n"
        )
        if a["error_type"]:
            out.write(f"  {a['error_type']}: {a['error_message']}\n")
        for line in a["traceback"].rstrip("\n").splitlines():
            out.write(f"    {line}\n")


def _state(text: str) -> TaskState:
    try:
        state = TaskState(text)
    except ValueError:
        state = None
    if state not in LISTED_STATES:
        names = ", ".join(s.value for s in LISTED_STATES)
        raise argparse.ArgumentTypeError(f"must be one of {names}; got {text!r}")
    return state


def _run_tasks(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args)
    with open_queue(config) as queue:
        page = queue.list_tasks(
            state=args.state, tenant=args.tenant, limit=args.limit, cursor=args.cursor
        )
    if args.json:
        data = {"items": [s.as_dict() for s in page.items], "cursor": page.cursor}
        out.write(json.dumps(data, indent=2, default=str) + "\n")
        return 0
    if not page.items:
        out.write("no tasks\n")
        return 0
    rows = [
        [
            s.task_id,
            s.tenant,
            s.name or "-",
            s.state.value,
            when(s.ended_at),
            str(s.retry_count),
            (s.reason or "")[:60],
        ]
        for s in page.items
    ]
    header = ("TASK", "TENANT", "NAME", "STATE", "ENDED", "RETRIES", "REASON")
    out.write("\n".join(format_table(header, rows, right=(5,))) + "\n")
    if page.cursor is not None:
        out.write(f"more: --cursor {page.cursor}\n")
    return 0


def _page_size(text: str) -> int:
    value = positive_int(text)
    if value > MAX_LIST_LIMIT:
        raise argparse.ArgumentTypeError(f"must be <= {MAX_LIST_LIMIT}, got {text}")
    return value


def _check_cursor(text: str) -> str:
    head, sep, rest = text.partition(":")
    if not sep or not head.isdigit() or not rest:
        raise argparse.ArgumentTypeError(f"is not a cursor of fairque tasks: {text!r}")
    return text


def add_tasks(sub: SubCommands) -> None:
    p = sub.add_parser(
        "tasks",
        help="browse the tasks that ended (finished, failed, canceled), newest first",
        description="A page of the tasks that ended, newest first, by --state and --tenant "
        "(ADR 70). Finished and canceled tasks are kept for the result TTL, failed ones "
        "until requeued or purged. Pass the printed --cursor for the next page.",
    )
    p.add_argument(
        "--state",
        type=_state,
        default=None,
        metavar="S",
        help="finished, failed or canceled (default: all three)",
    )
    p.add_argument("--tenant", default=None, metavar="T", help="one tenant's tasks")
    p.add_argument(
        "--limit",
        type=_page_size,
        default=50,
        metavar="N",
        help=f"tasks per page (at most {MAX_LIST_LIMIT}; default 50)",
    )
    p.add_argument(
        "--cursor",
        type=_check_cursor,
        default=None,
        metavar="C",
        help="continue after a page (the cursor it printed)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_run_tasks)
