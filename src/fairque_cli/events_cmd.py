"""``fairque events [--follow] [--since ID]``: the queue's events, one JSON object a line.

The queue's event log (ADR 71) tells what happened to its tasks (completed, failed, retried,
dead_lettered, canceled) and to the queue (paused, resumed, limits_changed). Without
``--follow`` the command prints what the log holds after ``--since`` (default: all it keeps)
and exits; with it, it starts at the log's end (or after ``--since``) and prints each new
event as it comes until interrupted (Ctrl-C or SIGTERM: exit 0). Each line's ``id`` is the
place to resume from: ``--since <id>`` prints what came after it, none missed, none twice.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from fairque_cli.context import SubCommands, UsageError, load_config, open_queue
from fairque_core.domain.events import EventType

__all__ = ["add_events"]

_TYPES = [t.value for t in EventType]


@contextmanager
def _stopping_on_signals(stop: Any) -> Iterator[None]:
    """SIGINT and SIGTERM call ``stop`` (the main thread only; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda _signum, _frame: stop())
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be >= 1, not {args.limit}")
    since = args.since if args.since is not None else (None if args.follow else "0")
    wanted = set(args.type or ())
    config = load_config(args)
    with open_queue(config) as queue:
        stream = queue.events(since, follow=args.follow, block=args.block)
        printed = 0
        with _stopping_on_signals(stream.stop):
            for event in stream:
                if wanted and event.type not in wanted:
                    continue
                out.write(json.dumps(event.as_dict()) + "\n")
                out.flush()
                printed += 1
                if args.limit is not None and printed >= args.limit:
                    break
    return 0


def add_events(sub: SubCommands) -> None:
    p = sub.add_parser(
        "events",
        help="print the queue's events (completed, failed, ...) as JSON lines",
        description=__doc__.split("\n\n")[1].replace("``", ""),
    )
    p.add_argument("--follow", "-f", action="store_true", help="wait for new events")
    p.add_argument(
        "--since",
        metavar="ID",
        default=None,
        help="print the events after this id (a line's `id`; 0 = all kept); default: all "
        "kept, or with --follow only new ones",
    )
    p.add_argument(
        "--type",
        action="append",
        choices=_TYPES,
        help="only events of this type (repeatable)",
    )
    p.add_argument("--limit", type=int, default=None, help="exit after printing N events")
    p.add_argument(
        "--block",
        type=float,
        default=1.0,
        help="seconds per blocking read with --follow (how soon a signal ends it)",
    )
    p.set_defaults(func=_run)
