"""What a claim on an idle queue costs the server (ADR 59; prints numbers, not a test).

    uv run --no-sync python bench/bench_idle_claim.py [--calls N] [--rounds R]
        [--compare OLD_SRC]

An idle worker claims once per ``poll_interval_seconds`` (its BLPOP of the wake signal times
out, and the claim behind it in the same pipeline runs: ADR 38), and every worker makes one
such claim each time the queue runs dry. On an idle queue nothing is leased, moved or written.
This bench makes ``N`` claims (count 10) on a queue that has served a task and is now idle, in a
child process against one embedded Valkey, and prints, from INFO commandstats:

- the server's time in the claim script per call (FCALL usec);
- the commands the script ran per call (every command but FCALL, CONFIG and INFO);
- which commands those were.

``--compare OLD_SRC`` runs the same in a child with ``OLD_SRC`` (a ``src`` directory of another
build, e.g. from ``git worktree add``) first on its path, the order alternating by round. It
prints each build's median over ``R`` rounds and their ratio. The machine is a shared 2-core
VM, so read the ratios; the commands per call do not move with the load.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

from _child import run_child

from fairque_redis.servers.embedded import EmbeddedValkey

CHILD = r"""
import json, sys, uuid
import redis
from fairque_core import Task
from fairque_redis import connect

url, calls = sys.argv[1], int(sys.argv[2])
queue = connect(url, queue="idle-" + uuid.uuid4().hex[:8])
backend = queue.backend
queue.push(Task.create("warm", payload={}))
got = backend.claim(worker_id="w", count=10)
backend.finish_batch([(c.message.task_id, c.lease.token, None) for c in got])
assert backend.claim(worker_id="w", count=10) == []  # the library loaded, the queue idle
server = redis.Redis.from_url(url)
server.config_resetstat()
for _ in range(calls):
    if backend.claim(worker_id="w", count=10):
        raise SystemExit("the idle queue leased a task")
stats = server.info("commandstats")
fcall = stats.pop("cmdstat_fcall")
inner = {
    name.removeprefix("cmdstat_"): value["calls"] / calls
    for name, value in stats.items()
    if not name.startswith(("cmdstat_config", "cmdstat_info"))
}
print(json.dumps({"usec": fcall["usec"] / calls, "calls": fcall["calls"] / calls,
                  "commands": sum(inner.values()), "by_command": inner}))
"""


def measure(url: str, calls: int, src: str | None) -> dict[str, object]:
    return run_child(["-c", CHILD, url, str(calls)], src=src)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000, help="idle claims per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare", metavar="OLD_SRC", help="another build's src directory")
    args = parser.parse_args()
    builds: dict[str, str | None] = {"this": None}
    if args.compare:
        builds["old"] = str(Path(args.compare).resolve())
    runs: dict[str, list[dict[str, object]]] = {name: [] for name in builds}
    print(f"loadavg at start: {os.getloadavg()}")
    with EmbeddedValkey() as server:
        for round_no in range(args.rounds):
            order = list(builds) if round_no % 2 == 0 else list(builds)[::-1]
            for name in order:
                runs[name].append(measure(server.url, args.calls, builds[name]))
    print(f"{args.calls:,} claims on an idle queue per round, median of {args.rounds} rounds")
    medians: dict[str, float] = {}
    for name, results in runs.items():
        usec = statistics.median(float(str(r["usec"])) for r in results)
        medians[name] = usec
        commands = statistics.median(float(str(r["commands"])) for r in results)
        last = results[-1]["by_command"]
        assert isinstance(last, dict)
        spelled = ", ".join(f"{k} {v:g}" for k, v in sorted(last.items()))
        print(
            f"  {name:5} {usec:7.1f} µs per claim, {commands:4.1f} commands per claim ({spelled})"
        )
    if "old" in medians:
        print(f"  this / old: x{medians['this'] / medians['old']:.3f}")
    print(f"loadavg at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
