"""``fairque limits set|show|clear --key K``: the limits by key (ADR 79).

``set --key K`` replaces the key's limits with the ones given (``--max-running``, ``--rate``,
``--burst``; per tenant unless ``--global``); ``clear --key K`` drops them (the key's parked
tasks go back to their queues); ``show --key K`` prints them and, per tenant (``(all)`` for a
global key), the leases running under the key and the tasks parked waiting for it.
"""

from __future__ import annotations

import argparse
import json
from typing import TextIO

import attrs

from fairque_cli.context import CliError, UsageError, load_config, open_queue
from fairque_core.domain.errors import TaskValidationError
from fairque_core.domain.key_limits import KeyLimits, KeyLimitStatus, check_key_limits

__all__ = ["key_limits_text", "limits_line", "run_key_limits"]

_FIELDS = ("max_running", "rate", "burst")


def limits_line(limits: KeyLimits | None) -> str:
    """A key's limits on one line (``none`` without)."""
    if limits is None:
        return "none"
    parts = []
    if limits.max_running is not None:
        parts.append(f"max_running {limits.max_running}")
    if limits.rate is not None:
        parts.append(f"rate {limits.rate:g}/s")
    if limits.burst is not None:
        parts.append(f"burst {limits.burst}")
    scope = "per tenant" if limits.per_tenant else "across all tenants"
    return ", ".join(parts) + f" ({scope})"


def key_limits_text(status: KeyLimitStatus) -> list[str]:
    """The lines ``limits show --key`` prints for ``status``."""
    lines = [f"limit key {status.key}", f"  limits      {limits_line(status.limits)}"]
    tenants = sorted({*status.running, *status.parked})
    if not tenants:
        lines.append("  nothing running or parked under the key")
    for tenant in tenants:
        running, parked = status.running.get(tenant, 0), status.parked.get(tenant, 0)
        lines.append(f"  {tenant or '(all)':<11} running {running}, parked {parked}")
    return lines


def _value(args: argparse.Namespace, name: str) -> object:
    value = getattr(args, name)
    return None if value is None or repr(value) == "none" else value


def run_key_limits(args: argparse.Namespace, out: TextIO) -> int:
    """``limits`` with ``--key``: set, show or clear that key's limits."""
    if args.tenant is not None:
        raise UsageError("give a TENANT or --key, not both")
    if args.max_queued is not None:
        raise UsageError("--max-queued is a tenant's limit (a key takes the others)")
    values = {name: _value(args, name) for name in _FIELDS}
    per_tenant = not args.global_key
    if args.action == "set":
        if all(value is None for value in values.values()):
            raise UsageError("limits set --key needs --max-running, --rate or --burst")
    elif any(getattr(args, name) is not None for name in _FIELDS) or args.global_key:
        raise UsageError(f"limits {args.action} --key takes no limit flags (use limits set)")
    try:
        if args.action == "set":
            check_key_limits(args.key, per_tenant=per_tenant, **values)
        else:
            check_key_limits(args.key)
    except TaskValidationError as exc:
        raise CliError(str(exc)) from exc
    config = load_config(args)
    with open_queue(config) as queue:
        if args.action == "set":
            queue.set_key_limits(args.key, per_tenant=per_tenant, **values)  # type: ignore[arg-type]
        elif args.action == "clear":
            queue.clear_key_limits(args.key)
        status = queue.get_key_limits(args.key)
    if args.json:
        out.write(json.dumps(attrs.asdict(status), indent=2) + "\n")
        return 0
    head = {"set": "set; now:", "clear": "cleared the key's limits; now:"}.get(args.action)
    if head:
        out.write(head + "\n")
    out.write("\n".join(key_limits_text(status)) + "\n")
    return 0
