"""PNG plots for docs/benchmarks.md: fairque beside one peer (issue 17).

    uv run --no-sync python bench/plots.py [--peer huey] [--quick] [--only NAMES] [--out docs/img]
    uv run --no-sync python bench/plots.py --draw-only [--out docs/img]

Measures first, in this environment, each measurement in its own process on a new embedded
Valkey (``compare.run_spec`` and the adapters in bench/peers/; the peer installed on demand by
``uv run --with``), and writes every figure to ``<out>/bench-plots.json``. Then it draws the
PNGs with ``bench/plots_draw.py`` under ``uv run --no-project --with matplotlib`` (matplotlib is
no project dependency). ``--only`` picks plots by name; ``--draw-only`` redraws from the JSON.

- ``concurrency`` (bench-concurrency.png): drain rate of N no-op tasks against worker concurrency
  1..16 (fairque's ``max_concurrent_tasks``, the peer's worker threads or jobs).
- ``tenants`` (bench-tenants.png): fairque's claim + finish rate, one task per call, against the
  number of active tenants, 10 to 100,000 (``bench_redis.fill`` and ``claim_finish``), best of
  3, with the server's time per script call.
- ``latency`` (bench-latency-cdf.png): CDF of push-to-start delay at 200 tasks/s to an idle
  worker with its defaults.
- ``flood`` (bench-flood.png): five light tenants push a task every 10 ms in turn; one second
  in, a ``flood`` tenant pushes N tasks at once; each light task's wait against its push time.
  On a FIFO queue the light tasks wait behind the flood; on fairque they should not.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from functools import partial
from pathlib import Path
from typing import Any

import redis
from bench_redis import claim_finish, fill, server_usec
from compare import PEERS, child_env, install, run_spec

from fairque_redis.servers.embedded import EmbeddedValkey

HERE = Path(__file__).resolve().parent
MATPLOTLIB = "matplotlib==3.11.2"
PLOTS = ("concurrency", "tenants", "latency", "flood")


def concurrency(libs: list[str], n: int, steps: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": n, "steps": steps}
    for lib in libs:
        out[lib] = [run_spec(lib, {"measure": "drain", "n": n, "mode": k}) for k in steps]
        print(f"concurrency {lib}: {[round(r.get('rate', 0)) for r in out[lib]]}", flush=True)
    return out


def tenants(counts: list[int], extra: int, cycles: int, rounds: int) -> dict[str, Any]:
    rows = []
    for count in counts:
        with EmbeddedValkey() as server:
            client = redis.Redis.from_url(server.url)
            backend = fill(server.url, count, count + extra)
            runs = [
                server_usec(client, partial(claim_finish, backend, cycles)) for _ in range(rounds)
            ]
            backend.close()
            client.close()
        best = max(runs)
        rows.append(
            {"tenants": count, "rate": best[0], "server_us_per_call": min(r[1] for r in runs)}
        )
        print(f"tenants {count:>7,}: {best[0]:,.0f} claim+finish/s", flush=True)
    return {"cycles": cycles, "rounds": rounds, "rows": rows}


def latency(libs: list[str], n: int) -> dict[str, Any]:
    out: dict[str, Any] = {"n": n}
    for lib in libs:
        out[lib] = run_spec(lib, {"measure": "latency", "n": n, "keep": True})
        print(f"latency {lib}: p50 {out[lib].get('p50')} p99 {out[lib].get('p99')}", flush=True)
    return out


def flood(libs: list[str], n: int, seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {"n": n, "seconds": seconds}
    for lib in libs:
        out[lib] = run_spec(lib, {"measure": "flood", "n": n, "seconds": seconds})
        waits = sorted(w for _, w in out[lib].get("samples", []))
        if waits:
            print(f"flood {lib}: light p50 {waits[len(waits) // 2]:.1f} ms, max {waits[-1]:.0f} ms")
        else:
            print(f"flood {lib}: {out[lib]}", flush=True)
    return out


def draw(data_file: Path, out: Path) -> None:
    uv = shutil.which("uv") or str(Path.home() / ".local/bin/uv")
    cmd = [uv, "run", "--no-project", "--quiet", "--with", MATPLOTLIB, "python"]
    subprocess.run(
        [*cmd, str(HERE / "plots_draw.py"), str(data_file), str(out)], check=True, env=child_env()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", default="huey", help=f"one of {', '.join(PEERS)}")
    parser.add_argument("--quick", action="store_true", help="small N, fewer points")
    parser.add_argument("--only", help=f"comma-separated subset of {', '.join(PLOTS)}")
    parser.add_argument("--out", default=str(HERE.parent / "docs" / "img"))
    parser.add_argument("--draw-only", action="store_true", help="redraw from the JSON")
    opts = parser.parse_args()
    out = Path(opts.out)
    data_file = out / "bench-plots.json"
    if not opts.draw_only:
        only = opts.only.split(",") if opts.only else list(PLOTS)
        data: dict[str, Any] = json.loads(data_file.read_text()) if data_file.exists() else {}
        libs = ["fairque"]
        reason = install(opts.peer)
        if reason:
            print(f"skipping {opts.peer}: {reason}")
        else:
            libs.append(opts.peer)
        q = opts.quick
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        print(f"{started}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}", flush=True)
        if "concurrency" in only:
            steps = [1, 4, 16] if q else [1, 2, 4, 8, 16]
            data["concurrency"] = concurrency(libs, 2_000 if q else 10_000, steps)
        if "tenants" in only:
            counts = [10, 1_000, 10_000] if q else [10, 100, 1_000, 10_000, 100_000]
            data["tenants"] = tenants(counts, 5_000 if q else 10_000, 500 if q else 3_000, 3)
        if "latency" in only:
            data["latency"] = latency(libs, 200 if q else 1_000)
        if "flood" in only:
            data["flood"] = flood(libs, 3_000 if q else 20_000, 3.0 if q else 8.0)
        data.setdefault("runs", {})
        for name in only:
            data["runs"][name] = {"started": started, "peer": opts.peer, "quick": q}
        out.mkdir(parents=True, exist_ok=True)
        data_file.write_text(json.dumps(data))
    draw(data_file, out)


if __name__ == "__main__":
    main()
