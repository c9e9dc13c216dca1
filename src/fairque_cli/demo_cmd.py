"""``fairque demo``: the flags, then :func:`fairque_cli.demo.run_demo`."""

from __future__ import annotations

import argparse
import math
import os
import signal
import threading
from typing import Any, TextIO

from fairque_cli.context import URL_ENV, CliError, SubCommands
from fairque_cli.demo import DemoOptions, run_demo

__all__ = ["add_demo"]

MAX_TENANTS = 1000
MAX_SECONDS = 3600
MAX_WORKERS = 256
MAX_BATCH = 1000
#: The largest --work-ms, --light-rate and --flood-factor.
MAX_FACTOR = 10_000


def _within(value: float, low: float, high: float, *, open_low: bool = False) -> bool:
    """``value`` in [low, high] (``(low, high]`` with ``open_low``); NaN and inf are not."""
    above = value > low if open_low else value >= low
    return math.isfinite(value) and above and value <= high


def _check(args: argparse.Namespace) -> None:
    """Every flag's range, before the demo starts (a NaN or infinite duration ran for ever;
    bad rates, factors and paths failed only after the whole run)."""
    if args.tenants < 3:
        raise CliError("--tenants must be at least 3 (a flood, a busy and a light tenant)")
    if args.tenants > MAX_TENANTS:
        raise CliError(f"--tenants must be at most {MAX_TENANTS}")
    if args.duration < 2:
        raise CliError("--duration must be at least 2 seconds")
    if not _within(args.duration, 2, MAX_SECONDS):
        raise CliError(f"--duration must be a number of seconds from 2 to {MAX_SECONDS}")
    if args.workers < 1 or args.batch < 1:
        raise CliError("--workers and --batch must be at least 1")
    if args.workers > MAX_WORKERS or args.batch > MAX_BATCH:
        raise CliError(f"--workers must be at most {MAX_WORKERS} and --batch at most {MAX_BATCH}")
    if args.work_ms <= 0:
        raise CliError("--work-ms must be > 0")
    for flag, value in (
        ("--work-ms", args.work_ms),
        ("--light-rate", args.light_rate),
        ("--flood-factor", args.flood_factor),
    ):
        if not _within(value, 0, MAX_FACTOR, open_low=True):
            raise CliError(f"{flag} must be a number > 0 and at most {MAX_FACTOR}")
    if args.json is not None:  # checked now: a bad path failed only after the whole run
        folder = os.path.dirname(args.json) or "."
        if not os.path.isdir(folder):
            raise CliError(f"--json {args.json!r}: no such directory")
        if os.path.isdir(args.json):
            raise CliError(f"--json {args.json!r} is a directory: give a file path")
        existed = os.path.exists(args.json)
        try:  # the one check that holds for root and odd filesystems: open it for writing
            with open(args.json, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise CliError(f"--json {args.json!r}: not writable ({exc.strerror})") from None
        if not existed:
            os.remove(args.json)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    _check(args)
    url = args.url or (os.environ.get(URL_ENV, "").strip() if args.use_env else "") or None
    opts = DemoOptions(
        tenants=args.tenants,
        duration=args.duration,
        workers=args.workers,
        work_ms=args.work_ms,
        batch=args.batch,
        light_rate=args.light_rate,
        flood_factor=args.flood_factor,
        url=url,
        json_path=args.json,
        queue=getattr(args, "queue", None),
    )
    # SIGTERM (`timeout` in CI) stops the demo as Ctrl-C does: the embedded server and the
    # demo's queues are cleaned up on the way out (killed outright, its temp dir stayed)
    previous = _interrupt_on_sigterm()
    try:
        summary = run_demo(opts, out)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0 if summary["ok"] or not args.check else 3


def _interrupt_on_sigterm() -> Any:
    """Make SIGTERM raise KeyboardInterrupt (on the main thread); the handler it replaced."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, interrupt)


def add_demo(sub: SubCommands) -> None:
    p = sub.add_parser(
        "demo",
        help="watch fair scheduling under a flood (embedded Valkey)",
        description="Run a baseline, then a flood by one tenant, on an embedded Valkey (or "
        "--url), and show per-tenant service shares, Jain's index and waits live.",
    )
    p.add_argument("--tenants", type=int, default=6, help="number of tenants (>= 3)")
    p.add_argument(
        "--duration", type=float, default=15.0, metavar="S", help="total seconds (both phases)"
    )
    p.add_argument("--workers", type=int, default=4, help="worker threads")
    p.add_argument("--batch", type=int, default=2, help="tasks claimed per claim_batch")
    p.add_argument("--work-ms", type=float, default=2.0, help="time each task 'works'")
    p.add_argument("--light-rate", type=float, default=15.0, help="tasks/s per light tenant")
    p.add_argument("--flood-factor", type=float, default=20.0, help="flood pushes x the others")
    p.add_argument(
        "--use-env",
        action="store_true",
        help=f"use ${URL_ENV} when --url is not given (default: embedded Valkey)",
    )
    p.add_argument("--json", default=None, metavar="PATH", help="write the summary as JSON")
    p.add_argument("--check", action="store_true", help="exit 3 when a fairness bar fails")
    p.set_defaults(func=_run)
