"""Draws the PNGs of bench/plots.py from its JSON (run by it under ``uv run --with matplotlib``).

    python bench/plots_draw.py DATA.json OUT_DIR

Imports matplotlib and the standard library only: it runs in a throwaway environment.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import json

import matplotlib.pyplot as plt

COLORS = {"fairque": "#1f77b4"}
OTHER = "#d62728"


def _libs(section: dict[str, Any]) -> list[str]:
    return [k for k, v in section.items() if isinstance(v, (list, dict)) and k not in ("rows",)]


def _color(lib: str) -> str:
    return COLORS.get(lib, OTHER)


def _note(fig: Any, run: dict[str, Any]) -> None:
    text = f"{run.get('started', '?')}, 2 shared cores, one run"
    if run.get("quick"):
        text += " (--quick)"
    fig.text(0.99, 0.01, text, ha="right", va="bottom", fontsize=7, color="#666")


def concurrency(data: dict[str, Any], run: dict[str, Any], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 4))
    steps = data["steps"]
    for lib in _libs(data):
        if lib == "steps":
            continue
        points = [(k, r["rate"]) for k, r in zip(steps, data[lib], strict=True) if "rate" in r]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", label=lib, color=_color(lib))
    ax.set_xscale("log", base=2)
    ax.set_xticks(steps, [str(s) for s in steps])
    ax.set_xlabel("worker concurrency (fairque max_concurrent_tasks; peer threads or jobs)")
    ax.set_ylabel("tasks/s")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Drain of {data['n']:,} no-op tasks, one worker process")
    ax.grid(alpha=0.3)
    ax.legend()
    _note(fig, run)
    fig.tight_layout()
    fig.savefig(out / "bench-concurrency.png", dpi=110)


def tenants(data: dict[str, Any], run: dict[str, Any], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 4))
    rows = data["rows"]
    xs = [r["tenants"] for r in rows]
    ax.plot(xs, [r["rate"] for r in rows], marker="o", color=_color("fairque"), label="rate")
    ax.set_xscale("log")
    ax.set_xlabel("active tenants")
    ax.set_ylabel("claim + finish per second (one task per call)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    twin = ax.twinx()
    twin.plot(xs, [r["server_us_per_call"] for r in rows], "--", marker="s", color="#777")
    twin.set_ylabel("server µs per script call (dashed)")
    twin.set_ylim(bottom=0)
    ax.set_title(f"fairque: the claim against the tenant count (best of {data['rounds']})")
    _note(fig, run)
    fig.tight_layout()
    fig.savefig(out / "bench-tenants.png", dpi=110)


def latency(data: dict[str, Any], run: dict[str, Any], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for lib in _libs(data):
        delays = data[lib].get("delays_ms") or []
        if not delays:
            continue
        ys = [(i + 1) / len(delays) for i in range(len(delays))]
        label = f"{lib} (p50 {data[lib]['p50']:.2f} ms, p99 {data[lib]['p99']:.2f} ms)"
        ax.plot(delays, ys, label=label, color=_color(lib))
    ax.set_xscale("log")
    ax.set_xlabel("push to start of the task, ms")
    ax.set_ylabel("fraction of tasks")
    ax.set_title(f"Latency at 200 tasks/s to an idle worker ({data['n']:,} tasks)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="lower right")
    _note(fig, run)
    fig.tight_layout()
    fig.savefig(out / "bench-latency-cdf.png", dpi=110)


def flood(data: dict[str, Any], run: dict[str, Any], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 4))
    flood_at = 1.0
    for lib in _libs(data):
        samples = data[lib].get("samples") or []
        if not samples:
            continue
        flood_at = data[lib].get("flood_at", flood_at)
        xs = [s[0] for s in samples]
        ys = [max(s[1], 0.01) for s in samples]
        ax.scatter(xs, ys, s=4, label=lib, color=_color(lib), alpha=0.6)
    ax.axvline(flood_at, color="#999", linestyle=":")
    ax.text(flood_at, 0.92, f" flood: {data['n']:,} tasks", transform=ax.get_xaxis_transform())
    ax.set_yscale("log")
    ax.set_xlabel("push time of a light tenant's task, s")
    ax.set_ylabel("its wait until start, ms")
    ax.set_title("Five light tenants (100 tasks/s) under a one-tenant flood")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="center right", markerscale=3)
    _note(fig, run)
    fig.tight_layout()
    fig.savefig(out / "bench-flood.png", dpi=110)


def main() -> None:
    data = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    runs = data.get("runs", {})
    for name, draw in (
        ("concurrency", concurrency),
        ("tenants", tenants),
        ("latency", latency),
        ("flood", flood),
    ):
        if name in data:
            draw(data[name], runs.get(name, {}), out)
            print(f"wrote {out}/bench-{'latency-cdf' if name == 'latency' else name}.png")


if __name__ == "__main__":
    main()
