"""Issue 35's low-load target in one run: push-to-handler latency at 200/s, fairque against
huey, and the floor that the scripts' own server time sets (prints numbers; not a test).

    uv run --no-sync python bench/bench_low_load.py [--rounds 5] [--n 1000] [--ab NAME]

Each measurement is compare.py's ``latency`` measure (``bench/peers/_measures.py``: a producer
process pushes one task every 5 ms, its ``perf_counter`` in the payload, to an idle worker with
its defaults; the handler records start - push), in its own process against its own new
embedded Valkey; huey runs in its own uv environment as in compare.py. Per round, in
alternating order:

- ``fairque`` and ``huey``: p50 and p99 of the latency;
- ``timed``: fairque again, the server logging every command's duration (``SLOWLOG`` at 0 µs,
  which slows the server a little: read its figures as an upper bound) to read the p50 of the
  two script calls on the path, the push and the claim the wake lets run (ADR 38: the claim is
  pipelined behind the worker's BLPOP and runs right after the push, before either reply is
  written, so both are on the path);
- with ``--ab NAME``: ``off``, fairque with ``FAIRQUE_ACCEL_OFF=NAME`` (an accelerator's
  on/off latency in the same run).

Printed per round and as medians: the ratios to huey, and the **floor**: huey's p50 plus the
push's and the claim's server time, i.e. what fairque's p50 would be if its client side cost
exactly what huey's does (one LPUSH and one BRPOP on the server: ~25 µs). The machine is a
shared 2-core VM whose load moves every figure: read the ratios of one round, and the load
printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from typing import Any

import compare
import redis

from fairque_redis.servers.embedded import EmbeddedValkey

#: the two script calls between a push and its handler (FCALL fq_<hash>_<name>)
ON_PATH = ("push", "claim")


def timed(n: int) -> dict[str, Any]:
    """fairque's latency measure with every command's duration logged: the p50 µs of each
    script call on the path, with the measure's own figures."""
    with EmbeddedValkey() as server:
        client = redis.Redis.from_url(server.url)
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 50 * n)
        spec = {"measure": "latency", "n": n, "url": server.url}
        out = subprocess.run(
            [*compare.command("fairque"), str(compare.adapter_of("fairque")), json.dumps(spec)],
            capture_output=True,
            text=True,
            env=compare.child_env("fairque"),
            check=False,
        )
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        if out.returncode or not lines:
            return {"error": (out.stderr.strip().splitlines() or ["no output"])[-1][:200]}
        result: dict[str, Any] = json.loads(lines[-1])
        spans: dict[str, list[int]] = {name: [] for name in ON_PATH}
        for entry in client.slowlog_get(50 * n):
            words = entry["command"].split()
            if len(words) > 1 and words[0].upper() == b"FCALL":
                name = words[1].decode().split("_", 2)[-1]  # fq_<hash>_<script>
                name = "push" if name == "push_plain" else name  # ADR 80's plain push
                if name in spans:
                    spans[name].append(int(entry["duration"]))
        client.close()
    for name, values in spans.items():
        result[f"{name}_us"] = statistics.median(values) if values else float("nan")
    return result


def one(name: str, n: int, ab: str) -> dict[str, Any]:
    if name == "timed":
        return timed(n)
    if name == "huey":
        return compare.run_spec("huey", {"measure": "latency", "n": n})
    before = os.environ.get("FAIRQUE_ACCEL_OFF")
    if name == "off":
        os.environ["FAIRQUE_ACCEL_OFF"] = ab  # compare.child_env copies the environment
    try:
        return compare.run_spec("fairque", {"measure": "latency", "n": n})
    finally:
        if before is None:
            os.environ.pop("FAIRQUE_ACCEL_OFF", None)
        else:
            os.environ["FAIRQUE_ACCEL_OFF"] = before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=1000, help="latency samples per measurement")
    parser.add_argument("--ab", metavar="NAME", help="also fairque with this accelerator off")
    opts = parser.parse_args()
    reason = compare.install("huey")
    if reason:
        raise SystemExit(f"huey is needed: {reason}")
    names = ["fairque", "huey", "timed", *(["off"] if opts.ab else [])]
    print(f"{os.cpu_count()} cpus, load at start {os.getloadavg()[0]:.2f}", flush=True)
    rows: list[dict[str, float]] = []
    for round_no in range(opts.rounds):
        order = names if round_no % 2 == 0 else names[::-1]
        got = {name: one(name, opts.n, opts.ab or "") for name in order}
        bad = {k: v for k, v in got.items() if "p50" not in v}
        if bad:
            print(f"round {round_no + 1}: failed {bad}", flush=True)
            continue
        fq, huey, t = got["fairque"], got["huey"], got["timed"]
        path_ms = (t["push_us"] + t["claim_us"]) / 1000
        row = {
            "fairque p50": fq["p50"],
            "fairque p99": fq["p99"],
            "huey p50": huey["p50"],
            "huey p99": huey["p99"],
            "push us": t["push_us"],
            "claim us": t["claim_us"],
            "floor p50": huey["p50"] + path_ms,
            "p50 ratio": fq["p50"] / huey["p50"],
            "p99 ratio": fq["p99"] / huey["p99"],
            "floor ratio": (huey["p50"] + path_ms) / huey["p50"],
            "rest ms": fq["p50"] - path_ms - huey["p50"],
            "load": statistics.mean(float(v["load"]) for v in got.values()),
        }
        if "off" in got:
            row["on/off p50"] = fq["p50"] / got["off"]["p50"]
            row["on/off p99"] = fq["p99"] / got["off"]["p99"]
        rows.append(row)
        print(f"round {round_no + 1}: " + json.dumps({k: round(v, 3) for k, v in row.items()}))
    if not rows:
        return
    print(f"\nmedians over {len(rows)} rounds (ms, µs for the scripts; ratios per round first):")
    for key in rows[0]:
        print(f"  {key:<12} {statistics.median(r[key] for r in rows):8.3f}")
    print(
        "p50 ratio and p99 ratio: fairque / huey (targets 1.3 and 1.5); floor ratio: (huey p50 "
        "+ push + claim) / huey p50; rest: fairque p50 - floor (client side beyond huey's)"
    )
    print(f"load at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
