"""Issue 35's low-load target in one run: push-to-handler latency at 200/s, fairque with the
hand-off of ADR 81 on, fairque with it off, and huey (prints numbers; not a test).

    uv run --no-sync python bench/bench_low_load.py [--rounds 5] [--n 1000] [--no-huey]

Each measurement is compare.py's ``latency`` measure (``bench/peers/_measures.py``: a producer
process pushes one task every 5 ms, its ``perf_counter`` in the payload, to an idle worker with
its defaults; the handler records start - push), in its own process against its own new
embedded Valkey. ``off`` runs the same build with ``FAIRQUE_ACCEL_OFF=wake_handoff``; huey runs
in its own uv environment as in compare.py. Rounds alternate the order of the three. Printed:
each round's p50/p99 and the ratios to huey inside that round, then the medians over the
rounds. The machine is a shared 2-core VM whose load moves every figure: read the ratios of
one round, and the load printed beside them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare  # noqa: E402 - bench/ on the path first

RUNS = {"on": ("fairque", ""), "off": ("fairque", "wake_handoff"), "huey": ("huey", "")}


def one(name: str, n: int) -> dict[str, Any]:
    lib, off = RUNS[name]
    before = os.environ.get("FAIRQUE_ACCEL_OFF")
    if off:
        os.environ["FAIRQUE_ACCEL_OFF"] = off  # compare.child_env copies the environment
    try:
        return compare.run_spec(lib, {"measure": "latency", "n": n})
    finally:
        if before is None:
            os.environ.pop("FAIRQUE_ACCEL_OFF", None)
        else:
            os.environ["FAIRQUE_ACCEL_OFF"] = before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=1000, help="latency samples per measurement")
    parser.add_argument("--no-huey", action="store_true")
    opts = parser.parse_args()
    names = ["on", "off"] if opts.no_huey else ["on", "off", "huey"]
    if "huey" in names:
        reason = compare.install("huey")
        if reason:
            print(f"huey skipped: {reason}")
            names.remove("huey")
    print(f"{os.cpu_count()} cpus, load at start {os.getloadavg()[0]:.2f}", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    ratios: list[dict[str, float]] = []
    for round_no in range(opts.rounds):
        order = names if round_no % 2 == 0 else names[::-1]
        got = {name: one(name, opts.n) for name in order}
        bad = {k: v for k, v in got.items() if "p50" not in v}
        if bad:
            print(f"round {round_no + 1}: failed {bad}", flush=True)
            continue
        for name in names:
            runs[name].append(got[name])
        line = ", ".join(
            f"{k} {v['p50']:.3f}/{v['p99']:.3f} ms (load {v['load']:.1f})" for k, v in got.items()
        )
        ratio = {"on/off p50": got["on"]["p50"] / got["off"]["p50"]}
        ratio["on/off p99"] = got["on"]["p99"] / got["off"]["p99"]
        if "huey" in got:
            for k in ("on", "off"):
                ratio[f"{k}/huey p50"] = got[k]["p50"] / got["huey"]["p50"]
                ratio[f"{k}/huey p99"] = got[k]["p99"] / got["huey"]["p99"]
        ratios.append(ratio)
        shown = ", ".join(f"{k} {v:.2f}" for k, v in ratio.items())
        print(f"round {round_no + 1}: p50/p99 {line}\n    ratios: {shown}", flush=True)
    if not ratios:
        return
    print(f"\nmedians over {len(ratios)} rounds (p50 / p99 ms, server µs per task):")
    for name in names:
        p50 = statistics.median(r["p50"] for r in runs[name])
        p99 = statistics.median(r["p99"] for r in runs[name])
        cpu = statistics.median(r["server_us"] for r in runs[name])
        print(f"  {name:<5} {p50:.3f} / {p99:.3f}   server {cpu:.0f} µs/task")
    print("median of the per-round ratios (target: p50 <= 1.3x huey, p99 <= 1.5x huey):")
    for key in ratios[0]:
        print(f"  {key:<12} {statistics.median(r[key] for r in ratios):.2f}")
    print(f"load at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
