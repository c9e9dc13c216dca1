"""Instructions the server retires per claimed, finished and pushed task, counted under callgrind.

    uv run --no-sync python bench/bench_claim_finish_ir.py [--compare REF_OR_SRC]
        [--tenants T ...] [--batch N] [--calls C] [--rounds R] [--timed] [--push]

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

``--push`` counts the producer's side instead (tenants default 100): a queue whose tenants all
hold a ready task, then ``C`` (default 200) one-message pushes (``RedisBackend.push``'s call:
a ready NORMAL task, no unique key, no limits), printed per call, and two ``push_batch`` of
``N`` (default 1,000) messages, printed per message. A build with the plain push (ADR 80) also
counts ``C`` calls of ``push_plain`` with the same kind of message, and two floors on a queue of
their own, called with the same arguments (``bench_plain_push.FLOOR``): ``floor``, the twelve
commands of push_plain's common case with no Lua around them, and ``writes``, the least write
of a record (its hash, the queue member, meta's sequence); each with its ratio to ``push``.

``--compare`` takes another tree's ``src`` directory, or a git ref (e.g. ``HEAD``), which is
extracted with ``git archive`` to a temporary directory; that build's function library is
loaded beside this one's (their names differ by hash), and both are called with this tree's
arguments, so a change of the scripts' calling convention cannot be compared this way. The
server time is taken as the server's clock (``now`` empty), as in production, so a finish sets
the real expiries too. Runs a few minutes. Instructions are not time (a cache miss costs more
than an add), but a change that retires fewer of them on the same path is cheaper. Each
counted stretch starts after a full collection of the functions' Lua heap.
``--not-kept`` measures this tree twice, its finishes not keeping the records
(``keep=False``, ADR 78: "this tree") against keeping them ("old").
``--timed`` measures the same on a plain embedded Valkey as the server's µs in FCALL (INFO
commandstats, reset before each stretch): medians, and the median of the per-round ratios,
which are the figures to read on a shared machine. ``FQ_IR_KEEP=1`` keeps the callgrind
dumps (one per measure, in order) for ``callgrind_annotate``. The callgrind machinery is
shared with ``bench_script_ir.py`` (``_callgrind.py``). Figures: docs/benchmarks-history.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

import redis
from _callgrind import (
    GC_FUNCTION,
    GC_LIBRARY,
    TIMEOUT,
    Counter,
    callgrind_server,
    library_in,
    old_src,
)
from bench_plain_push import FLOOR

from fairque_core import Message, Priority
from fairque_core.domain.models import Claimed
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.scripting.function_library import LIBRARY, library_for

PUSH_WARM = 20  # one-message pushes before counting (every tenant active, library warm)


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
    forget: bool = False,
) -> dict[str, float]:
    """Instructions (or µs) per task of claim, finish and finish_claim for one build
    (``forget``: the finishes do not keep the records, ADR 78)."""
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
        client.fcall(GC_FUNCTION, 0)
        counter.zero()

    def run(name: str, call: Any) -> Any:
        return call.parse(client.fcall(functions[name], len(keys), *keys, *call.args))

    def claim() -> list[Claimed]:
        got: list[Claimed] = run("claim", planner.claim(worker_id="w", count=batch))
        assert len(got) == batch, len(got)
        return got

    def items(held: list[Claimed]) -> list[Any]:
        if forget:
            return [(c.message.task_id, c.lease.token, None, None, False) for c in held]
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


def measure_push(
    url: str,
    queue: str,
    functions: dict[str, str],
    counter: Counter | TimeCounter,
    tenants: int,
    batch: int,
    calls: int,
) -> dict[str, float]:
    """Instructions (or µs) of one-message pushes (per call) and of ``push_batch`` of
    ``batch`` messages (per message) for one build: ready NORMAL tasks, no unique keys, no
    limits, into a queue whose ``tenants`` tenants are all active already."""
    client = redis.Redis.from_url(url, socket_timeout=TIMEOUT)
    client.flushall()
    backend = RedisBackend.from_url(url, queue=queue, socket_timeout=TIMEOUT)
    planner = backend._planner
    keys = planner.anchors
    serial = iter(range(10**9))

    def messages(n: int) -> list[Message]:
        return [
            Message(
                task_id=f"p{i}",
                tenant=f"u{i % tenants}",
                priority=Priority.NORMAL,
                body=b'{"n": 1}',
            )
            for i in (next(serial) for _ in range(n))
        ]

    def push(msgs: list[Message]) -> None:
        call = planner.push(msgs)
        flags = call.parse(client.fcall(functions["push"], len(keys), *keys, *call.args))
        assert all(f == 1 for f in flags), flags

    push(messages(tenants))  # every tenant active
    for _ in range(PUSH_WARM):
        push(messages(1))
    one = [messages(1) for _ in range(calls)]
    client.fcall(GC_FUNCTION, 0)
    counter.zero()
    for m in one:
        push(m)
    out: dict[str, float] = {"push": counter.dump() / calls}
    if "push_plain" in functions:  # the plain push accelerator (ADR 80), the same pushes
        plain = [messages(1) for _ in range(calls)]
        client.fcall(GC_FUNCTION, 0)
        counter.zero()
        for m in plain:
            call = planner.push(m)
            reply = client.fcall(functions["push_plain"], len(keys), *keys, *call.args)
            assert reply == [1], reply
        out["push_plain"] = counter.dump() / calls
        # the floors (bench_plain_push.FLOOR): push_plain's 12 commands alone, and the least
        # write of a record, with the same arguments, on a queue of their own
        floor_keys = [key.replace(f"{{{queue}}}", "{irfloor}") for key in keys]
        for name in ("fq_bench_plain_floor", "fq_bench_plain_writes"):
            floor = [messages(1) for _ in range(calls)]
            client.fcall(GC_FUNCTION, 0)
            counter.zero()
            for m in floor:
                call = planner.push(m)
                client.fcall(name, len(keys), *floor_keys, *call.args)
            out[name.removeprefix("fq_bench_plain_")] = counter.dump() / calls
        calls *= 2  # for the count of `pushed` below
    batches = [messages(batch) for _ in range(2)]
    push(messages(batch))  # warm: the batch's table sizes
    client.fcall(GC_FUNCTION, 0)
    counter.zero()
    for m in batches:
        push(m)
    out["push_batch"] = counter.dump() / (2 * batch)
    pushed = int(client.hget(f"fq:{{{queue}}}:stats", "pushed") or 0)
    assert pushed == tenants + PUSH_WARM + calls + 3 * batch, pushed
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
    client.function_load(FLOOR, replace=True)
    client.close()
    results: dict[tuple[int, str], list[dict[str, float]]] = {}
    for tenants in opts.tenants:
        for r in range(opts.rounds):
            order = list(builds.items())
            if r % 2:
                order.reverse()
            for name, (_, functions) in order:
                if opts.push:
                    got = measure_push(
                        url, "irp", functions, counter, tenants, opts.batch, opts.calls
                    )
                else:
                    forget = opts.not_kept and name == "this tree"
                    got = measure(
                        url, "irc", functions, counter, tenants, opts.batch, opts.calls, forget
                    )
                results.setdefault((tenants, name), []).append(got)
    return results


def run_callgrind(
    builds: dict[str, tuple[str, dict[str, str]]], opts: argparse.Namespace
) -> dict[tuple[int, str], list[dict[str, float]]]:
    with callgrind_server(("fcallCommand",)) as (url, counter):
        return run_builds(url, builds, counter, opts)


def run_timed(
    builds: dict[str, tuple[str, dict[str, str]]], opts: argparse.Namespace
) -> dict[tuple[int, str], list[dict[str, float]]]:
    from fairque_redis.servers.embedded import EmbeddedValkey

    with EmbeddedValkey() as server:
        return run_builds(server.url, builds, TimeCounter(server.url), opts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--compare", metavar="REF_OR_SRC", help="another build: src dir or ref")
    parser.add_argument("--tenants", type=int, nargs="+", help="default 100 5 (--push: 100)")
    parser.add_argument(
        "--batch", type=int, help="tasks per call (default 50; --push: per push_batch, 1000)"
    )
    parser.add_argument(
        "--calls", type=int, help="counted calls per measure (default 6; --push: pushes, 200)"
    )
    parser.add_argument(
        "--push", action="store_true", help="count one-message pushes and push_batch instead"
    )
    parser.add_argument(
        "--reference",
        action="store_true",
        help="compare with this tree's reference build (every lua/_include/fast/ include plain,"
        " the accelerator claim_view off) as 'old'",
    )
    parser.add_argument(
        "--not-kept",
        action="store_true",
        help="this tree's finishes with keep=False against keep=True (as 'old'), ADR 78",
    )
    parser.add_argument("--rounds", type=int, default=2, help="measures per build")
    parser.add_argument(
        "--timed", action="store_true", help="server µs (INFO commandstats), not instructions"
    )
    opts = parser.parse_args()
    if opts.tenants is None:
        opts.tenants = [100] if opts.push else [100, 5]
    if opts.batch is None:
        opts.batch = 1000 if opts.push else 50
    if opts.calls is None:
        opts.calls = 200 if opts.push else 6
    builds: dict[str, tuple[str, dict[str, str]]] = {
        "this tree": (LIBRARY.code, dict(LIBRARY.functions))
    }
    if opts.not_kept:
        builds["old"] = builds["this tree"]
    elif opts.reference:
        plain = library_for(frozenset())
        builds["old"] = (plain.code, dict(plain.functions))
    elif opts.compare:
        with old_src(opts.compare) as src:
            builds["old"] = library_in(src)
    results = run_timed(builds, opts) if opts.timed else run_callgrind(builds, opts)
    if opts.push:
        what = "µs in FCALL (INFO commandstats)" if opts.timed else "instructions inside FCALL"
        print(
            f"{what}: per one-message push ({opts.calls} counted) and per message of "
            f"push_batch({opts.batch}) (2 counted); ready NORMAL tasks, no unique keys or "
            f"limits, every tenant active; {opts.rounds} rounds, the builds' order alternating"
            + (f"; load average {os.getloadavg()[0]:.1f}" if opts.timed else "")
        )
    elif opts.timed:
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
        ops = ("push", "push_plain", "floor", "writes", "push_batch") if opts.push else ()
        for op in ops or ("claim", "finish", "finish_claim"):
            line = f"    {op:<13}"
            if any(op not in m for name in builds for m in results[(tenants, name)]):
                continue  # a build without the plain push (ADR 80)
            per = {name: [m[op] for m in results[(tenants, name)]] for name in builds}
            if op in ("push_plain", "floor", "writes"):
                rows = results[(tenants, "this tree")]
                line += f" /push x{statistics.fmean(m[op] / m['push'] for m in rows):.3f}"
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
