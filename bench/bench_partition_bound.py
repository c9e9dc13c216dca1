"""Project ADR 34's two-level bound to 100 masters, by simulation from the real picker.

The churn of ``tests/property/test_partition_fairness.py`` (tenants joining, leaving and
changing weight between epochs, weights 0.01-100), with P partitions (one per master) and the
real ``PartitionPicker`` as level 1 (checked against the reference model at every claim), level
2 ``FairState``. Prints, per P: tenant-epochs, how many went over their bound, the worst deficit
as a ratio of its bound, the worst deficit in tasks, and the bound's worst case
``K k (P - 1) + n_p - 1`` for the run's largest partition. Pure Python, no server.

    uv run python bench/bench_partition_bound.py [--partitions 4 16 32 64 100] [--seeds 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from property.test_partition_fairness import churn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[4, 16, 32, 64, 100])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    print(f"workers {args.workers}, batch {args.batch}, {args.seeds} seeds x {args.epochs} epochs")
    print(
        f"{'P':>4} {'tenant-epochs':>14} {'over':>5} {'worst/bound':>12} "
        f"{'worst tasks':>12} {'max bound':>10} {'secs':>6}"
    )
    for partitions in args.partitions:
        started = time.perf_counter()
        checked = over = 0
        worst_ratio = worst_tasks = max_bound = 0.0
        for seed in range(args.seeds):
            n, ratios, model = churn(
                partitions,
                workers=args.workers,
                batch=args.batch,
                seed=seed,
                epochs=args.epochs,
                claims=10 * partitions,
                strict=False,
            )
            checked += n
            over += sum(1 for r in ratios if r > 1.0 + 1e-9)
            worst_ratio = max(worst_ratio, *ratios)
            worst_tasks = max(worst_tasks, model.max_worst)
            max_bound = max(max_bound, model.max_bound)
        secs = time.perf_counter() - started
        print(
            f"{partitions:>4} {checked:>14} {over:>5} {worst_ratio:>12.3f} "
            f"{worst_tasks:>12.2f} {max_bound:>10.2f} {secs:>6.1f}"
        )


if __name__ == "__main__":
    main()
