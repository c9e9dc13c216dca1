"""The worker hand-off accelerator (``app/worker/handoff.py``, ADR 46/51/65) on, off, and on
without its GIL yield, drain by drain, each in its own child (``bench_worker.py --one``).

    uv run --no-sync python bench/bench_handoff_ab.py [ROUNDS] [TASKS]

Modes alternate in a rotating order within each round; the per-round on/off ratios' median is
printed per setting (the thread settings also on / no-yield: ``HandOffSteps.yield_seconds = 0``).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _child import run_child

from fairque_redis.servers.embedded import EmbeddedValkey

WORKER = str(Path(__file__).parent / "bench_worker.py")
SETTINGS = [
    ("thread defaults", "thread", 10, None),
    ("thread tuned", "thread", 100, 50),
    ("async defaults", "async", 10, None),
    ("async tuned", "async", 100, 50),
]
NO_YIELD = (
    "import sys,runpy;sys.path.insert(0,sys.argv[2].rsplit('/',1)[0]);"
    "from fairque_core.app.worker.handoff import HandOffSteps;"
    "HandOffSteps.yield_seconds=0.0;sys.argv=[sys.argv[2],'--one',sys.argv[1]];"
    "runpy.run_path(sys.argv[0],run_name='__main__')"
)
MODES = {"on": "", "off": "handoff", "noyield": ""}


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    total = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    rates: dict[tuple[str, str], list[float]] = {}
    with EmbeddedValkey() as server:
        for r in range(rounds):
            names = list(MODES)
            names = names[r % 3 :] + names[: r % 3]
            for label, kind, cap, prefetch in SETTINGS:
                for mode in names:
                    if mode == "noyield" and kind != "thread":
                        continue
                    spec = json.dumps([server.url, kind, total, cap, prefetch])
                    args = (
                        ["-c", NO_YIELD, spec, WORKER]
                        if mode == "noyield"
                        else [WORKER, "--one", spec]
                    )
                    got = run_child(args, None, {"FAIRQUE_ACCEL_OFF": MODES[mode]})
                    rates.setdefault((label, mode), []).append(got["rate"])
                    print(
                        f"round {r + 1} {label:<16} {mode:<8} {got['rate']:>8,.0f}/s "
                        f"claims {got['claims']} load {got['load']:.1f}",
                        flush=True,
                    )
    print()
    for label, *_ in SETTINGS:
        on, off = rates[(label, "on")], rates[(label, "off")]
        line = (
            f"{label:<16} on {statistics.median(on):>7,.0f} off {statistics.median(off):>7,.0f} "
            f"on/off {statistics.median(a / b for a, b in zip(on, off, strict=True)):.2f}"
        )
        if (label, "noyield") in rates:
            ny = rates[(label, "noyield")]
            ratio = statistics.median(a / b for a, b in zip(on, ny, strict=True))
            line += f" | no-yield {statistics.median(ny):>7,.0f} on/no-yield {ratio:.2f}"
        print(line)


if __name__ == "__main__":
    main()
