"""``fairque limits set|show|clear TENANT``: a tenant's flow-control limits (ADR 28); with
``--key K`` instead of a tenant, the limits by key (ADR 79, ``key_limits_cmd.py``).

``set`` changes only the fields given (``none`` clears one); ``clear`` drops every limit of the
tenant's own (its tier's defaults still apply); ``show`` prints its own limits, the ones in force
and where it stands: running vs cap, queued vs cap, tokens and next start time, and its cap hits,
throttles and refusals. A tenant need not exist yet (limits may be set before its first push);
its id must be valid. None of them applies the config file's weights, tiers or limits.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from collections.abc import Callable
from typing import Any, TextIO

import attrs

from fairque_cli.context import CliError, SubCommands, UsageError, load_config, open_queue
from fairque_cli.key_limits_cmd import run_key_limits
from fairque_core.domain.errors import TaskValidationError
from fairque_core.domain.limits import LIMIT_FIELDS, Limits, LimitStatus, check_changes
from fairque_core.domain.validation import validate_id

__all__ = ["add_limits", "limits_text"]

#: The value that clears one field in ``limits set``.
_CLEAR = "none"


class _Clear:
    """``--FIELD none``: clear that field (argparse's default None means: leave it)."""

    def __repr__(self) -> str:
        return _CLEAR


CLEAR = _Clear()


def _limit_type(name: str) -> Callable[[str], object]:
    """An argparse type for ``--<name>``: ``none``, or a value ``check_changes`` accepts."""

    def parse(text: str) -> object:
        if text.strip().lower() == _CLEAR:
            return CLEAR
        value: float
        try:
            value = float(text) if name == "rate" else int(text)
        except ValueError:
            kind = "a number" if name == "rate" else "an integer"
            raise argparse.ArgumentTypeError(f"must be {kind} or {_CLEAR}, got {text!r}") from None
        try:
            check_changes({name: value})
        except TaskValidationError as exc:
            raise argparse.ArgumentTypeError(f"{exc.rule}, got {text}") from None
        return value

    parse.__name__ = name  # argparse names the type in its messages
    return parse


def _number_text(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _limits_line(limits: Limits) -> str:
    parts = []
    for name in LIMIT_FIELDS:
        value = getattr(limits, name)
        if value is not None:
            parts.append(f"{name} {_number_text(value)}{'/s' if name == 'rate' else ''}")
    return ", ".join(parts) or "none"


def _of(value: int, cap: int | None) -> str:
    return f"{value}" if cap is None else f"{value} of {cap}"


def limits_text(status: LimitStatus, now: float) -> list[str]:
    """The lines ``limits show`` prints for ``status`` (``now``: epoch seconds)."""
    eff = status.effective
    running = _of(status.running, eff.max_running) + (" (capped)" if status.capped else "")
    if eff.rate is None:
        rate = "no rate limit"
    elif status.next_start_at is None:
        rate = f"{status.tokens} start(s) allowed now"
    else:
        at = datetime.datetime.fromtimestamp(status.next_start_at).strftime("%H:%M:%S.%f")[:-3]
        wait = max(0.0, status.next_start_at - now)
        rate = f"throttled: next start at {at} (in {wait:.3f} s)"
    rows = [
        ("own limits", _limits_line(status.own)),
        ("in force", _limits_line(eff) + ("" if eff == status.own else " (with tier defaults)")),
        ("running", running),
        ("queued", _of(status.queued, eff.max_queued)),
        ("rate", rate),
        (
            "counters",
            f"cap hits {status.cap_hits}, throttles {status.throttles}, refusals {status.refusals}",
        ),
    ]
    head = f"tenant {status.tenant}" + (
        " (paused: claims skip it until resumed)" if status.paused else ""
    )
    return [head] + [f"  {key:<11} {value}" for key, value in rows]


def _status_json(status: LimitStatus) -> dict[str, Any]:
    return attrs.asdict(status)


def _print(args: argparse.Namespace, out: TextIO, status: LimitStatus, head: str = "") -> int:
    if args.json:
        out.write(json.dumps(_status_json(status), indent=2) + "\n")
        return 0
    if head:
        out.write(head + "\n")
    out.write("\n".join(limits_text(status, time.time())) + "\n")
    return 0


def _run_limits(args: argparse.Namespace, out: TextIO) -> int:
    if args.key is not None:
        return run_key_limits(args, out)
    if args.tenant is None:
        raise UsageError(f"limits {args.action} needs a TENANT or --key K")
    if args.global_key:
        raise UsageError("--global goes with --key")
    changes: dict[str, float | None] = {}
    if args.action == "set":
        for name in LIMIT_FIELDS:
            value = getattr(args, name)
            if value is not None:
                changes[name] = None if value is CLEAR else value
        if not changes:
            flags = ", ".join("--" + name.replace("_", "-") for name in LIMIT_FIELDS)
            raise UsageError(f"limits set needs at least one of {flags}")
    elif _given(args):  # show printed the status unchanged, as if the flags had been set
        raise UsageError(f"limits {args.action} takes no limit flags (use limits set)")
    try:  # never the queue-wide limits: a tenant id that is not one is refused here
        validate_id(args.tenant, "tenant")
    except TaskValidationError as exc:
        raise CliError(str(exc)) from exc
    config = load_config(args)
    with open_queue(config) as queue:  # never applies the config's tenants (read or write)
        if args.action == "set":
            queue.backend.set_limits(changes, tenant=args.tenant)
        elif args.action == "clear":
            queue.clear_tenant_limits(args.tenant)
        status = queue.get_tenant_limits(args.tenant)
    if args.action == "set":
        return _print(args, out, status, "set; now:")
    if args.action == "clear":
        return _print(args, out, status, "cleared the tenant's own limits; now:")
    return _print(args, out, status)


def _given(args: argparse.Namespace) -> bool:
    return any(getattr(args, name) is not None for name in LIMIT_FIELDS)


def add_limits(sub: SubCommands) -> None:
    p = sub.add_parser(
        "limits",
        help="set, show or clear a tenant's flow-control limits, or a limit key's",
        description="set TENANT changes the limits given (a value, or 'none' to clear that "
        "one); show TENANT prints its own limits, those in force (with its tier's defaults), "
        "running vs cap, queued vs cap, the rate's tokens and next start time, and its cap "
        "hits, throttles and refusals; clear TENANT drops its own limits. Changes apply at "
        "once. The tenant need not have pushed yet. With --key K instead of TENANT: the "
        "limits of the tasks whose limit_key is K (set replaces them; --global: one cap and "
        "rate across all tenants), shown with what runs and waits under the key.",
    )
    p.add_argument("action", choices=("set", "show", "clear"))
    p.add_argument("tenant", metavar="TENANT", nargs="?")
    p.add_argument("--key", metavar="K", help="a limit key's limits instead of a tenant's")
    p.add_argument(
        "--global",
        dest="global_key",
        action="store_true",
        help="with set --key: one cap and rate for the key across all tenants",
    )
    helps = {
        "max_running": ("N", "at most N tasks running at once (leases, over all workers)"),
        "rate": ("R", "at most R starts per second (GCRA on the server's clock)"),
        "burst": ("B", "starts allowed at once after an idle spell (with --rate; default 1)"),
        "max_queued": ("Q", "refuse pushes that take ready + scheduled tasks over Q"),
    }
    for name, (metavar, text) in helps.items():
        p.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            type=_limit_type(name),
            default=None,
            metavar=metavar,
            help=f"{text}; 'none' clears it",
        )
    p.add_argument("--json", action="store_true", help="print the tenant's status as JSON")
    p.set_defaults(func=_run_limits)
