"""``fairque stats --tenants``: the per-tenant fairness table, sorted by lag.

One reading is ``get_tenant_fairness`` of the ``--tenant`` tenants, or of every tenant of the
queue (one read-only call per 1000 tenants). The table shows each tenant's weight, tier,
ready and running tasks, lag in turns, dispatches, the oldest head task's wait, whether a
limit holds it (``limited``: ``cap``, ``rate``, ``paused``, ``queue_paused``) and the
starvation alarm, sorted with alarms first, then by lag (largest first), then by wait; the
first ``--limit`` rows are shown. ``--watch S`` reads again every S seconds and adds what
changed between two readings (:func:`~fairque_core.domain.tenant_figures.fairness_window`):
each tenant's dispatches in the window, its share, its fair share and their ratio, and Jain's
index over the servable tenants (backlogged, and not held by their own limits in the window:
those read ``limited`` with the reason and are left out). ``--json`` prints one JSON
document (with ``--watch``: one line per reading). Enqueue-to-start wait percentiles are
the worker's: see the ``fairque.task.wait_time`` histogram of the metrics plugin
(docs/fairness.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from collections.abc import Sequence
from typing import Any, TextIO

from fairque_cli.context import describe_target, load_config, open_queue, split_ids
from fairque_cli.term import LiveView, bold, format_table
from fairque_core.app.engine.queue import FairQueue
from fairque_core.domain.tenant_figures import (
    FairnessWindow,
    TenantFairness,
    TenantWindow,
    fairness_window,
)
from fairque_core.domain.validation import MAX_TENANT_PAGE

__all__ = ["read_figures", "run_tenant_fairness", "tenant_fairness_lines"]

_HEADER = ("tenant", "weight", "tier", "ready", "running", "lag", "dispatched", "oldest ready")
_WINDOW_HEADER = ("window", "share", "fair", "ratio")
_TAIL_HEADER = ("limited", "alarm")


def read_figures(queue: FairQueue, named: Sequence[str]) -> list[TenantFairness]:
    """The figures of ``named``, or (none named) of every tenant the queue has seen."""
    if named:
        out: list[TenantFairness] = []
        for start in range(0, len(named), MAX_TENANT_PAGE):
            out += queue.get_tenant_fairness(list(named[start : start + MAX_TENANT_PAGE]))
        return out
    out = []
    while True:
        page = queue.get_tenant_fairness(limit=MAX_TENANT_PAGE, offset=len(out))
        out += page
        if len(page) < MAX_TENANT_PAGE:
            return out


def _order(figure: TenantFairness) -> tuple[bool, float, float, str]:
    return (not figure.starving, -figure.lag, -(figure.oldest_ready_age or 0.0), figure.tenant)


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def tenant_fairness_lines(
    queue: FairQueue,
    target: str,
    figures: Sequence[TenantFairness],
    window: FairnessWindow | None,
    *,
    limit: int,
    styled: bool,
) -> tuple[list[str], dict[str, Any]]:
    """The text and the JSON of one reading (``window``: against the previous one)."""
    rows_shown = sorted(figures, key=_order)[:limit]
    starving = [f for f in figures if f.starving]
    data: dict[str, Any] = {
        "queue": queue.name,
        "tenants_total": len(figures),
        "tenants": [f.as_dict() for f in rows_shown],
        "starving": [f.tenant for f in starving],
    }
    lines = [bold(f"queue {queue.name}", styled) + f"  on {target}  (fairness by tenant)", ""]
    header = list(_HEADER) + (list(_WINDOW_HEADER) if window is not None else [])
    header += _TAIL_HEADER
    rows: list[list[str]] = []
    for f in rows_shown:
        row = [
            f.tenant,
            f"{f.weight:g}",
            str(f.tier),
            str(f.ready),
            str(f.running),
            _num(f.lag),
            str(f.dispatched),
            _seconds(f.oldest_ready_age),
        ]
        alarm, limited = f.starving_reason, f.limited_reason
        if window is not None:
            w = window.tenants.get(f.tenant)
            if w is not None:
                row += [str(w.dispatched), _num(w.share, 3), _num(w.fair_share, 3)]
                row.append(_num(w.share_ratio))
                alarm, limited = w.starving_reason, w.limited_reason or limited
            else:
                row += ["-"] * len(_WINDOW_HEADER)
        rows.append([*row, limited or "-", alarm or "-"])
    if rows:
        lines += format_table(header, rows, right=range(1, len(header) - 1))
        lines.append("")
    shown = f"{len(rows_shown)} of {len(figures):,} tenants" if figures else "no tenants yet"
    lines.append(f"{shown}; sorted: alarms first, then lag (turns ahead of the virtual time)")
    alarms = {f.tenant: f.starving_reason for f in starving}
    if window is not None:
        alarms = {t: w.starving_reason for t, w in window.tenants.items() if w.starving}
    shown_alarms = ", ".join(f"{t} ({why})" for t, why in sorted(alarms.items()))
    lines.append(f"starving: {shown_alarms or 'none'}")
    held = {f.tenant: f.limited_reason for f in figures if f.limited}
    if window is not None:
        held.update({t: w.limited_reason for t, w in window.tenants.items() if w.limited})
    data["limited"] = dict(sorted(held.items()))
    shown_held = ", ".join(f"{t} ({why})" for t, why in sorted(held.items())[:limit])
    more = f" and {len(held) - limit:,} more" if len(held) > limit else ""
    lines.append(f"limited (held by a limit, not owed turns): {shown_held or 'none'}{more}")
    if window is not None:
        data["window"] = {
            "seconds": window.seconds,
            "dispatched": window.dispatched,
            "backlogged": window.backlogged,
            "limited": window.limited,
            "jain": window.jain,
            "tenants": {t: _window_dict(w) for t, w in window.tenants.items()},
        }
        jain = "n/a" if window.jain is None else f"{window.jain:.4f}"
        left_out = f", {window.limited} limited left out" if window.limited else ""
        lines.append(
            f"last {window.seconds:.1f}s: {window.dispatched:,} dispatches; Jain index over "
            f"{window.backlogged} servable tenants{left_out} {jain} (1.0 = shares match weights)"
        )
    return lines, data


def _window_dict(window: TenantWindow) -> dict[str, Any]:
    return {
        "dispatched": window.dispatched,
        "backlogged": window.backlogged,
        "share": window.share,
        "fair_share": window.fair_share,
        "share_ratio": window.share_ratio,
        "starving_reason": window.starving_reason,
        "limited_reason": window.limited_reason,
    }


def run_tenant_fairness(args: argparse.Namespace, out: TextIO) -> int:
    """``fairque stats --tenants`` (``args``: the stats flags)."""
    config = load_config(args)
    named = split_ids(args.tenant)
    target = describe_target(config)
    with open_queue(config) as queue:
        strict = queue.config.strict_tiers
        view = LiveView(out, period=args.watch or 2.0, tty_period=args.watch or 1.0)
        previous: tuple[float, list[TenantFairness]] | None = None
        try:
            while True:
                at = time.monotonic()
                figures = read_figures(queue, named)
                window = None
                if previous is not None:
                    window = fairness_window(
                        previous[1], figures, at - previous[0], strict_tiers=strict
                    )
                previous = (at, figures)
                styled = view.tty and not args.json
                lines, data = tenant_fairness_lines(
                    queue, target, figures, window, limit=args.limit, styled=styled
                )
                if args.json:
                    out.write(json.dumps(data, indent=None if args.watch else 2) + "\n")
                    out.flush()
                elif not args.watch:
                    view.finish(lines)
                else:
                    stamp = dt.datetime.now().strftime("%H:%M:%S")
                    view.update([*lines, "", f"{stamp}  (Ctrl-C to stop)"], force=True)
                if not args.watch:
                    return 0
                time.sleep(max(0.0, args.watch - (time.monotonic() - at)))
        except KeyboardInterrupt:
            return 0
