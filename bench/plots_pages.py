"""Draws the benchmark page's two summary charts from saved data (docs/benchmarks.md).

    uv run --no-project --with matplotlib python bench/plots_pages.py [--out docs/img]

* ``bench-peers.png`` from ``docs/img/bench-compare.json`` (``bench/compare.py --json``): the
  medians of its rounds, fairque beside each peer, for the one-by-one enqueue, the drain (the
  better of each library's defaults and tuned settings) and the latency at 200 tasks/s.
* ``bench-partitions.png`` from ``docs/img/bench-partitions.json`` (the figures
  ``bench/bench_partitions.py --rounds`` printed): the claims each master served, and the
  server CPU per task of P=3's busiest master over P=1's master, round by round.

Imports matplotlib and the standard library only: it runs in a throwaway environment, as
bench/plots_draw.py does.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

IMG = Path(__file__).resolve().parents[1] / "docs" / "img"
FAIRQUE = "#1f77b4"
PEER = "#bbbbbb"
FLOOR = "#777777"


def _median(rows: list[dict[str, Any]], key: str) -> float:
    values = [float(r[key]) for r in rows if r.get(key)]
    return statistics.median(values) if values else 0.0


def peers(data: dict[str, Any], out: Path) -> None:
    raw = data["raw"]
    libs = [lib for lib in raw if lib != "floor"]
    libs.sort(key=lambda lib: (lib != "fairque", lib))
    measures = [
        (
            "enqueue one by one (tasks/s, higher is better)",
            lambda m: _median(m.get("enqueue_one", []), "rate"),
        ),
        (
            "drain, best of defaults/tuned (tasks/s, higher is better)",
            lambda m: max(
                _median(m.get("drain_defaults", []), "rate"),
                _median(m.get("drain_tuned", []), "rate"),
            ),
        ),
        (
            "latency p50 at 200 tasks/s (ms, lower is better, log)",
            lambda m: _median(m.get("latency", []), "p50"),
        ),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    for ax, (title, measure) in zip(axes, measures, strict=True):
        values = [measure(raw[lib]) for lib in libs]
        colors = [FAIRQUE if lib == "fairque" else PEER for lib in libs]
        bars = ax.bar(libs, values, color=colors, edgecolor="#333", linewidth=0.5)
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="x", labelrotation=35, labelsize=8)
        if "log" in title:
            ax.set_yscale("log")
        for bar, value in zip(bars, values, strict=True):
            label = f"{value:,.0f}" if value >= 10 else f"{value:.1f}"
            ax.annotate(
                label,
                (bar.get_x() + bar.get_width() / 2, value),
                ha="center",
                va="bottom",
                fontsize=7,
            )
    fig.suptitle(
        f"fairque and its peers, one worker, {data.get('n', '?'):,} no-op tasks, one Valkey",
        fontsize=11,
    )
    fig.text(
        0.99,
        0.01,
        f"bench/compare.py --rounds {data.get('rounds')}, {data.get('started')}, "
        f"fairque at {data.get('commit')}, "
        f"{data.get('server')}, 2 shared cores; medians of the rounds",
        ha="right",
        va="bottom",
        fontsize=7,
        color="#666",
    )
    fig.tight_layout(rect=(0, 0.04, 1, 0.93))
    fig.savefig(out / "bench-peers.png", dpi=110)
    plt.close(fig)


def partitions(data: dict[str, Any], out: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    share = data["claims_share"]
    masters = ["master 1", "master 2", "master 3"]
    width = 0.38
    xs = range(len(masters))
    left.bar(
        [x - width / 2 for x in xs],
        share["P=1"],
        width,
        label="P=1 (one partition)",
        color=PEER,
        edgecolor="#333",
    )
    left.bar(
        [x + width / 2 for x in xs],
        share["P=3"],
        width,
        label="P=3 (three partitions)",
        color=FAIRQUE,
        edgecolor="#333",
    )
    left.set_xticks(list(xs), masters)
    left.set_ylabel("% of the claims served")
    left.set_title(f"Claims per master, 3-master cluster ({share['started']})", fontsize=9)
    left.legend(fontsize=8)
    n = 0
    for run in data["cpu_ratio_rounds"]:
        rounds = list(range(n + 1, n + 1 + len(run["ratios"])))
        right.plot(
            rounds,
            run["ratios"],
            "o-",
            label=f"{run['started']} (median x{statistics.median(run['ratios']):.3f})",
        )
        n += len(run["ratios"])
    right.axhline(1.0, color="#333", linewidth=0.8, linestyle="--")
    right.set_ylim(0.6, 1.3)
    right.set_xlabel("round")
    right.set_ylabel("server CPU per task, P=3 busiest master / P=1")
    right.set_title("Per-master cost of partitioning (below 1: no dearer)", fontsize=9)
    right.legend(fontsize=7)
    fig.suptitle("Partitioned queue: 30 tenants x 600 no-op tasks, 3 worker processes", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(out / "bench-partitions.png", dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=IMG)
    args = parser.parse_args()
    peers(json.loads((IMG / "bench-compare.json").read_text(encoding="utf-8")), args.out)
    partitions(json.loads((IMG / "bench-partitions.json").read_text(encoding="utf-8")), args.out)


if __name__ == "__main__":
    main()
