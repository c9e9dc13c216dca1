"""``fairque pause|resume [--tenant T]``: hold a tenant, or the whole queue, out of claims.

A paused tenant is skipped from the next claim on (other tenants go on being served); a paused
queue leases nothing. Pushes are still accepted and running tasks run to their end; idle
workers keep waiting. ``resume`` undoes it: a resumed tenant is served again like a newcomer
(no credit for the time it was paused). Neither applies the config file's tenants.
"""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from fairque_cli.context import SubCommands, load_config, open_queue

__all__ = ["add_pause"]


def _run(args: argparse.Namespace, out: TextIO) -> int:
    pausing = args.command == "pause"
    config = load_config(args)
    with open_queue(config) as queue:  # never applies the config's tenants
        if pausing:
            queue.pause(args.tenant)
        else:
            queue.resume(args.tenant)
        queue_paused = queue.is_paused()
        tenant_paused = None if args.tenant is None else queue.is_paused(args.tenant)
    name = config.queue.name
    if args.json:
        record = {
            "queue": name,
            "tenant": args.tenant,
            "action": args.command,
            "paused": queue_paused if args.tenant is None else tenant_paused,
            "queue_paused": queue_paused,
        }
        out.write(json.dumps(record) + "\n")
        return 0
    done = "paused" if pausing else "resumed"
    if args.tenant is None:
        out.write(f"{done} queue {name!r}\n")
    else:
        out.write(f"{done} tenant {args.tenant!r} of queue {name!r}\n")
        if queue_paused:
            out.write(f"note: the whole queue {name!r} is paused (fairque resume)\n")
    return 0


def add_pause(sub: SubCommands) -> None:
    helps = {
        "pause": (
            "stop claims serving a tenant, or the whole queue",
            "Claims skip the tenant (or, without --tenant, lease nothing from the queue) from "
            "the next claim on; pushes are still accepted, running tasks run to their end and "
            "idle workers keep waiting. Undo with fairque resume.",
        ),
        "resume": (
            "serve a paused tenant, or the paused queue, again",
            "Undoes fairque pause: a resumed tenant is served again like a newcomer (no credit "
            "for the time it was paused); idle workers are woken.",
        ),
    }
    for command, (text, description) in helps.items():
        p = sub.add_parser(command, help=text, description=description)
        p.add_argument(
            "--tenant",
            metavar="T",
            default=None,
            help=f"{command} this tenant only (default: the whole queue)",
        )
        p.add_argument("--json", action="store_true", help="print the outcome as JSON")
        p.set_defaults(func=_run)
