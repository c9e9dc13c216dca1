"""fairque against the Python peers, each on a fresh server, same N, same no-op task (issue 17).

    uv run --no-sync python bench/compare.py [--n 20000] [--rounds 3] [--peers huey,rq,...]
        [--quick] [--json out.json] [--baseline REF]
    uv run --no-sync python bench/compare.py --report out.json

Every measurement runs in its own process against its own new embedded Valkey
(``EmbeddedValkey``): ``python bench/peers/<lib>_peer.py '<spec>'`` (the harness is
bench/peers/_common.py, which says what each measure does). fairque runs in this environment;
each peer runs in an environment of its own, made on demand by ``uv run --no-project --with
<peer>==<version>`` (not a project dependency). A peer that does not install, or whose run fails,
is reported as skipped with the reason. Rounds alternate the order of the libraries; the
median of the rounds is printed. ``--peers none`` runs fairque alone. ``--quick``: N 1,000, one
round, 100 latency samples, huey alone unless ``--peers`` says otherwise. ``--json`` keeps
every round's figures (written as soon as the last measurement ends); ``--report`` prints the
tables of such a file again. ``--baseline REF`` measures fairque at an older commit too (a
detached git worktree of REF, or a checkout directory), as ``fairque@base`` in the same rounds,
and prints a before/after table that flags any figure more than 5 % worse (issue 29).

The first table is the issue's: per measure, fairque, the best peer, their ratio (above 1:
fairque ahead; for latency and server CPU, lower is better, so the ratio is peer / fairque),
the issue's target and whether this run met it. Ratios are printed, never asserted. The
second table has every library's figures, and the ``floor`` row: redis-py and one Redis list
with no queue around them (``peers/floor_peer.py``), what any Python queue on this server and
machine pays at least; it is never the best peer. Server CPU is Valkey's ``used_cpu_sys +
used_cpu_user`` (INFO cpu) from the worker's start to its stop, per drained task.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis
from compare_report import BASELINE, before_after, fmt, rows, table

from fairque_redis.servers.embedded import EmbeddedValkey

HERE = Path(__file__).resolve().parent
PEERS: dict[str, list[str]] = {
    "huey": ["huey==3.5.4", "redis==8.1.0", "hiredis"],
    "rq": ["rq==2.12.0", "hiredis"],
    "dramatiq": ["dramatiq[redis]==2.2.1", "hiredis"],
    "taskiq": ["taskiq==0.13.0", "taskiq-redis==1.2.4", "hiredis"],
    "arq": ["arq==0.28.0"],  # arq pins redis[hiredis] < 6
    "celery": ["celery[redis]==5.7.0", "hiredis"],
    # not a queue: redis-py and one list (bench/peers/floor_peer.py), the machine's floor;
    # printed in the table of every library, never the "best peer" (compare_report.FLOOR)
    "floor": ["redis==8.1.0", "hiredis"],
}
#: peers whose only worker is an asyncio one: their default drain is their AsyncWorker figure
ASYNC_NATIVE = {"taskiq", "arq"}
#: key -> (measure, worker mode)
MEASURES: dict[str, tuple[str, str | None]] = {
    "enqueue_one": ("enqueue_one", None),
    "enqueue_bulk": ("enqueue_bulk", None),
    "drain_defaults": ("drain", "defaults"),
    "drain_tuned": ("drain", "tuned"),
    "drain_async": ("drain", "async"),
    "async_push": ("async_push", None),
    "latency": ("latency", None),
    # fairque alone: the producer's side through the intake (ADR 47), the same measures
    "enqueue_one_intake": ("enqueue_one", None),
    "enqueue_bulk_intake": ("enqueue_bulk", None),
    "async_push_intake": ("async_push", None),
    "latency_intake": ("latency", None),
}
#: the measures only fairque makes (its second push path); peers report them as skipped
INTAKE = "_intake"
TIMEOUT = 900


#: the checkout ``--baseline`` measures as ``fairque@base`` (None: no baseline in this run)
BASE_TREE: Path | None = None


def command(lib: str) -> list[str]:
    if lib in ("fairque", BASELINE):
        return [sys.executable]
    uv = shutil.which("uv") or str(Path.home() / ".local/bin/uv")
    withs = [arg for spec in PEERS[lib] for arg in ("--with", spec)]
    return [uv, "run", "--no-project", "--quiet", *withs, "python"]


def child_env(lib: str = "") -> dict[str, str]:
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)  # the peers' uv environments are not this project's
    if lib == BASELINE and BASE_TREE is not None:  # the old tree's packages come first
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(BASE_TREE / "src"), env.get("PYTHONPATH", "")) if p
        )
    return env


def adapter_of(lib: str) -> Path:
    if lib == BASELINE and BASE_TREE is not None:
        return BASE_TREE / "bench" / "peers" / "fairque_peer.py"
    return HERE / "peers" / f"{lib}_peer.py"


def baseline_tree(ref: str) -> Path:
    """A checkout of ``ref``: the directory itself when it holds ``src/``, else a detached
    git worktree of that commit in a temporary directory (removed at exit)."""
    given = Path(ref)
    if (given / "src").is_dir():
        return given.resolve()
    import atexit
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="fairque-base-")) / "tree"
    repo = HERE.parent
    subprocess.run(["git", "worktree", "add", "--detach", str(where), ref], cwd=repo, check=True)
    atexit.register(
        subprocess.run, ["git", "worktree", "remove", "--force", str(where)], cwd=repo, check=False
    )
    return where


def install(lib: str) -> str | None:
    """None when the library's environment is ready, else why not."""
    if lib in ("fairque", BASELINE):
        return None
    if not Path(command(lib)[0]).exists():
        return "uv not found"
    module = {"taskiq": "taskiq_redis", "floor": "redis"}.get(lib, lib)
    try:
        out = subprocess.run(
            [*command(lib), "-c", f"import {module}"],
            check=False,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=child_env(),
        )
    except subprocess.TimeoutExpired:
        return f"install timed out after {TIMEOUT} s"
    if out.returncode:
        return "install failed: " + (out.stderr.strip().splitlines() or ["?"])[-1][:200]
    return None


def run_one(lib: str, key: str, n: int, latency_n: int) -> dict[str, Any]:
    measure, mode = MEASURES[key]
    native = lib in ("fairque", BASELINE)
    if key == "drain_async" and not native and lib not in ASYNC_NATIVE:
        return {"skip": "no asyncio worker"}
    if key == "drain_async" and lib in ASYNC_NATIVE:
        return {"same_as": "drain_defaults"}
    if key.endswith(INTAKE) and not native:
        return {"skip": "fairque only (its intake)"}
    latency = measure == "latency"
    spec: dict[str, Any] = {"measure": measure, "n": latency_n if latency else n}
    if mode:
        spec["mode"] = mode
    if key.endswith(INTAKE):
        spec["push"] = "intake"
    return run_spec(lib, spec)


def run_spec(lib: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One measurement of ``lib`` in its own process, against a new embedded Valkey."""
    with EmbeddedValkey() as server:
        spec = {**spec, "url": server.url}
        adapter = str(adapter_of(lib))
        try:
            out = subprocess.run(
                [*command(lib), adapter, json.dumps(spec)],
                check=False,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                env=child_env(lib),
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {TIMEOUT} s"}
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        return {"error": (out.stderr.strip().splitlines() or ["no output"])[-1][:200]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median per field of the rounds; a skip, an error or a ``same_as`` in any round wins."""
    for run in runs:
        if "skip" in run or "error" in run or "same_as" in run:
            return run
    fields = [k for k in runs[0] if isinstance(runs[0][k], (int, float))]
    return {k: statistics.median(float(r[k]) for r in runs) for k in fields}


def measure_all(libs: list[str], n: int, latency_n: int, rounds: int) -> dict[str, Any]:
    """Every round's result per library and measure (the orders alternate by round)."""
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {lib: {} for lib in libs}
    for round_no in range(rounds):
        order = libs if round_no % 2 == 0 else libs[::-1]
        for key in MEASURES:
            for lib in order:
                result = run_one(lib, key, n, latency_n)
                raw[lib].setdefault(key, []).append(result)
                print(f"round {round_no + 1} {lib:<9} {key:<15} {json.dumps(result)}", flush=True)
    return raw


def report(doc: dict[str, Any]) -> list[dict[str, str]]:
    """Print both tables from a run's document (``raw`` and ``skipped``); returns the rows."""
    med = {lib: {k: median_of(runs) for k, runs in per.items()} for lib, per in doc["raw"].items()}
    for per in med.values():
        if per.get("drain_async", {}).get("same_as"):
            per["drain_async"] = per["drain_defaults"]
    for lib, reason in doc["skipped"].items():
        med[lib] = {key: {"skip": reason} for key in MEASURES}
    doc["median"] = med
    summary = rows(med)
    print(
        f"\n{doc['n']:,} no-op tasks, median of {doc['rounds']} round(s), a fresh "
        f"{doc['server']} each, started {doc['started']}"
    )
    cols = ["measure", "fairque", "best peer", "ratio", "target", "met"]
    print(table(cols, [[row[c] for c in cols] for row in summary]))
    every = [[lib] + [fmt(per.get(key), key) for key in MEASURES] for lib, per in med.items()]
    print("\nevery library (drains: rate and server CPU per task)")
    print(table(["library", *MEASURES], every))
    if BASELINE in med:
        print(f"\nbefore ({BASELINE}: {doc.get('baseline', '?')}) and after (this tree)")
        cols = ["measure", "figure", "before", "after", "after vs before", "flag"]
        print(table(cols, before_after(med)))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, help="tasks per measurement (default 20,000)")
    parser.add_argument("--latency-n", type=int, help="latency samples (default 1,000)")
    parser.add_argument("--rounds", type=int, help="median of this many rounds (default 3)")
    parser.add_argument("--peers", help=f"comma-separated, or none (default: {','.join(PEERS)})")
    parser.add_argument("--quick", action="store_true", help="N 1,000, one round, huey only")
    parser.add_argument("--json", metavar="PATH", help="write every figure here")
    parser.add_argument("--report", metavar="PATH", help="print the tables of a --json file")
    parser.add_argument(
        "--baseline",
        metavar="REF",
        help="also measure fairque at this git ref (or checkout directory) as fairque@base, "
        "in the same rounds, and print a before/after table",
    )
    opts = parser.parse_args()
    if opts.report:
        report(json.loads(Path(opts.report).read_text()))
        return
    n = opts.n or (1_000 if opts.quick else 20_000)
    latency_n = opts.latency_n or (100 if opts.quick else 1_000)
    rounds = opts.rounds or (1 if opts.quick else 3)
    wanted = opts.peers if opts.peers is not None else ("huey" if opts.quick else ",".join(PEERS))
    names = [p.strip() for p in wanted.split(",") if p.strip() and p.strip() != "none"]
    unknown = [p for p in names if p not in PEERS]
    if unknown:
        parser.error(f"unknown peers {unknown}; known: {', '.join(PEERS)}")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{started}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}", flush=True)
    skipped = {}
    for lib in names:
        reason = install(lib)
        if reason:
            skipped[lib] = reason
            print(f"skipping {lib}: {reason}", flush=True)
    libs = ["fairque", *(p for p in names if p not in skipped)]
    if opts.baseline:
        global BASE_TREE  # noqa: PLW0603 - one run, one baseline, set before any measurement
        BASE_TREE = baseline_tree(opts.baseline)
        libs.insert(1, BASELINE)
    with EmbeddedValkey() as server:
        info = redis.Redis.from_url(server.url).info("server")
    version = info.get("valkey_version") or info.get("redis_version")
    doc: dict[str, Any] = {
        "started": started,
        "cpus": os.cpu_count(),
        "server": f"Valkey {version}",
    }
    doc.update({"n": n, "latency_n": latency_n, "rounds": rounds, "pins": PEERS})
    doc["baseline"] = opts.baseline or ""
    doc.update({"skipped": skipped, "raw": measure_all(libs, n, latency_n, rounds)})
    if opts.json:  # before the report, so that a report bug never loses a run
        Path(opts.json).write_text(json.dumps(doc, indent=1))
    doc["rows"] = report(doc)
    print(f"load at the end {os.getloadavg()[0]:.2f}")
    if opts.json:
        Path(opts.json).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
