"""``fairque doctor [--repair] [--json]``: check one queue's Redis structures against each other
(:mod:`fairque_redis.doctor.examine`) and, with ``--repair``, put them back in line with the task
records (:mod:`fairque_redis.doctor.repair`). Run it on a quiet queue: workers stopped or idle.
A partitioned queue (ADR 34) is checked and repaired partition by partition, as many as the
server records; each finding and change then starts with ``partition <n>:``.

Exit status: 0 when the queue is sound (after the repair, with ``--repair``), 1 when findings
remain.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from fairque_cli.context import CliError, SubCommands, describe_target, load_config, open_queue
from fairque_core.domain.scoring import to_ms

__all__ = ["add_doctor"]


def _run_doctor(args: argparse.Namespace, out: TextIO) -> int:
    from fairque_redis.doctor.examine import check, queue_spaces
    from fairque_redis.doctor.repair import repair

    config = load_config(args)
    findings: list[str] = []
    actions: list[str] = []
    remaining: list[str] = []
    with open_queue(config) as queue:
        client: Any = getattr(queue.backend, "client", None)
        if client is None:
            raise CliError("fairque doctor reads a Redis/Valkey server (not memory://)")
        # a partitioned queue (ADR 34): each partition is checked, and repaired, on its own
        spaces = queue_spaces(client, queue.name)
        for keys in spaces:
            label = f"partition {keys.partition}: " if len(spaces) > 1 else ""
            found = check(client, keys)
            findings += [label + line for line in found]
            left = found
            if args.repair and found:
                done = repair(
                    client,
                    keys,
                    horizon_ms=to_ms(config.queue.aging_horizon_seconds),
                    strict_tiers=config.queue.strict_tiers,
                )
                actions += [label + line for line in done]
                left = check(client, keys)
            remaining += [label + line for line in left]
    if args.json:
        report: dict[str, Any] = {
            "queue": queue.name,
            "partitions": len(spaces),
            "findings": findings,
            "repaired": actions,
            "remaining": remaining,
        }
        out.write(json.dumps(report, indent=2) + "\n")
        return 0 if not remaining else 1
    where = f"queue {queue.name!r} on {describe_target(config)}"
    if len(spaces) > 1:
        where += f" ({len(spaces)} partitions)"
    if not findings:
        out.write(f"{where}: sound (no finding)\n")
        return 0
    out.write(f"{where}: {len(findings)} finding(s)\n")
    out.writelines(f"  - {line}\n" for line in findings)
    if args.repair:
        out.write(f"repaired ({len(actions)} change(s)):\n")
        out.writelines(f"  - {line}\n" for line in actions)
        if remaining:
            out.write(f"{len(remaining)} finding(s) remain:\n")
            out.writelines(f"  - {line}\n" for line in remaining)
        else:
            out.write("the queue is sound now\n")
    else:
        out.write("run `fairque doctor --repair` to fix what can be fixed (workers idle)\n")
    return 0 if not remaining else 1


def add_doctor(sub: SubCommands) -> None:
    p = sub.add_parser(
        "doctor",
        help="check a queue's Redis structures; --repair fixes them",
        description="Read every key of the queue and check the structures against each other "
        "(each task where its state says, gauges and counters equal to what they count, a "
        "tenant active exactly while it has ready work, keys of their own type). --repair "
        "deletes keys of the wrong type, sends tasks started without a lease back to ready, "
        "puts every task where its record says, fixes the active sets and recomputes the "
        "gauges and counters. Run it while the workers are stopped or idle.",
    )
    p.add_argument("--repair", action="store_true", help="fix what can be fixed")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run_doctor)
