"""Instructions a script call costs inside the server, counted (not timed) under callgrind.

    uv run --no-sync python bench/bench_script_ir.py [--compare OLD_SRC] [--calls N] [--fcall]

The machine this project is measured on is shared and noisy: a server's µs per call (INFO
commandstats) moves by 10-20% from run to run, more than most single changes to a script.
Instructions retired do not depend on the load. This starts a Valkey (the embedded binary)
under ``valgrind --tool=callgrind``, counting only inside EVALSHA (and FCALL), and runs one
ready push per call (100 tenants, each already active, no unique keys, no limits: the common
case of ``bench_push.py``) for each script given:

- this tree's ``push`` (and, with ``--compare``, the ``push`` of another tree's ``src``,
  flattened by that tree's own resolver);
- with ``--fcall``, this tree's ``push`` loaded as a function library (FUNCTION LOAD, called
  with FCALL): the include helpers are then made once per load instead of once per call,
  which shows what the per-call closures cost (ADR 39); and the push function of the library
  fairque loads by default (``fairque_redis.scripting.function_library.LIBRARY``, ADR 41).

Each script runs on a queue of its own, filled the same way, so every variant sees the same
data. Prints instructions per call and each variant's ratio to this tree's EVALSHA. Needs
valgrind (``callgrind_control``); runs about a minute. Instructions are not time (a cache miss
costs more than an add), but a change that retires fewer of them in the same code path is
cheaper. ``--compare`` also takes a git ref (extracted with ``git archive``); the callgrind
machinery is shared with ``bench_claim_finish_ir.py`` (``_callgrind.py``), whose ``--push``
counts the push of the function library (FCALL) against another build's.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import redis
from _callgrind import callgrind_server, old_src, script_in

from fairque_core import Message, Priority
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.scripting.function_library import LIBRARY, _deferred
from fairque_redis.scripting.scripts import resolve

TENANTS = 100
WARM = 20  # calls per variant before counting (script cached, every tenant active)
SCRIPT_MARK = "-- ---- script push ----"


def as_library(script: str) -> str:
    """``script`` as a function library: the includes at load, the body as ``fq_bench_push``.
    The constants that need a global (``FQ_CALL = redis.call`` ...) are set by the first call,
    as the library builder does (a library's top level runs without them)."""
    lines = script.splitlines()
    mark = lines.index(SCRIPT_MARK)
    head, init = _deferred("\n".join(lines[1:mark]))  # without the script's shebang
    body = "\n".join(lines[mark + 1 :])
    setup = "local fq_bench_ready = false\nlocal function fq_bench_init()\n"
    setup += "\n".join(init) + "\n  fq_bench_ready = true\nend\n"
    return (
        "#!lua name=fq_bench\n"
        + head
        + "\n"
        + setup
        + "redis.register_function{function_name='fq_bench_push', "
        + "callback=function(KEYS, ARGV)\n"
        + "if not fq_bench_ready then fq_bench_init() end\n"
        + body
        + "\nend}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--compare", metavar="OLD_SRC", help="another tree's src/ (or a git ref) to count too"
    )
    parser.add_argument("--calls", type=int, default=300, help="counted calls per variant")
    parser.add_argument("--fcall", action="store_true", help="also count push as a function")
    opts = parser.parse_args()
    variants: dict[str, str] = {"this tree": resolve("push")}
    if opts.compare:
        with old_src(opts.compare) as src:
            variants["old tree"] = script_in(src, "push")
    counted: dict[str, int] = {}
    with callgrind_server(("evalShaCommand", "fcallCommand")) as (url, counter):
        client = redis.Redis.from_url(url)
        runners: dict[str, Callable[[list[Any], list[Any]], Any]] = {}
        for name, text in variants.items():
            script = client.register_script(text)
            runners[name] = lambda keys, args, s=script: s(keys=keys, args=args)
        if opts.fcall:
            client.function_load(as_library(variants["this tree"]), replace=True)
            runners["this tree, FCALL"] = lambda keys, args: client.fcall(
                "fq_bench_push", len(keys), *keys, *args
            )
            # the library fairque itself loads (ADR 41): every script, helpers shared
            client.function_load(LIBRARY.code, replace=True)
            runners["fairque library"] = lambda keys, args: client.fcall(
                LIBRARY.functions["push"], len(keys), *keys, *args
            )
        for k, (name, run) in enumerate(runners.items()):
            backend = RedisBackend.from_url(url, queue=f"ir{k}")
            backend.push_batch(
                [
                    Message(task_id=f"w{t}", tenant=f"u{t}", priority=Priority.NORMAL, body=b"{}")
                    for t in range(TENANTS)
                ]
            )
            anchors = backend._planner.anchors
            calls = [
                backend._planner.push(
                    [
                        Message(
                            task_id=f"t{i}",
                            tenant=f"u{i % TENANTS}",
                            priority=Priority.NORMAL,
                            body=b'{"n": 1}',
                        )
                    ]
                ).args
                for i in range(WARM + opts.calls)
            ]
            for args in calls[:WARM]:
                run(anchors, args)
            counter.zero()
            for args in calls[WARM:]:
                run(anchors, args)
            counted[name] = counter.dump() // opts.calls
            stored = client.hget(f"fq:{{ir{k}}}:stats", "pushed")
            assert int(stored or 0) == TENANTS + WARM + opts.calls, (name, stored)
            backend.close()
        client.close()
    base = counted["this tree"]
    print(f"one ready push per call, {opts.calls} calls, instructions inside the server")
    for name, count in counted.items():
        print(f"  {name:<18} {count:>9,} per call   x{count / base:.3f} of this tree")


if __name__ == "__main__":
    main()
