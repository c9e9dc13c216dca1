"""Where a script's server time goes, by Lua helper: a profiling build of the scripts.

    uv run --no-sync python bench/bench_lua_profile.py [--tenants T ...] [--batch N]
        [--tasks N] [--push N] [--top K]

The callgrind benches (``bench_claim_finish_ir.py``, ``bench_layout_floor.py``) count what a
whole call costs; the server binary has no symbols for the Lua interpreter, so they cannot say
which helper of a script spends it. This bench builds a *profiling copy* of this tree's
scripts in a temporary directory and runs a drain on it:

- every multi-line ``local function fq_*`` (or table field ``function FQ_X.f``) of
  ``lua/_include/`` is rebound, right at its
  ``end`` (in the same definition block, so the include resolver keeps it), to a wrapper that
  reads ``os.clock()`` (the server process's CPU time) before and after the call, and adds the
  time to the helper's *inclusive* total and, minus the time of the wrapped helpers it called,
  to its *self* total;
- the claim, finish, finish_claim and push scripts time their whole body too, and write the
  totals into a hash (``fqprof``, HINCRBYFLOAT) before they return; the bench reads it.

A drain of ``--tasks`` no-op tasks over ``T`` tenants (push_batch of 1,000, then claims of
``--batch`` and finish_claim calls of ``--batch``, one client) runs per tenant count, and
``--push`` one-message pushes (100 active tenants). Printed: µs per task (or push) for each
helper, inclusive and self, with calls per task, the ``top`` by self time first.

What the figures are and are not:

- The probes cost time themselves: each wrapped call reads the clock twice. The bench measures
  that cost (an empty wrapped helper, called 100,000 times in the server) and prints it; the
  self figures here have the probe's cost of each call taken away (``self - calls * probe``,
  never below zero). Inclusive figures keep their children's probes, so read those as upper
  bounds. The script totals of the profiling build are printed beside the real build's (the
  same drain on this tree's unchanged scripts, INFO commandstats): their ratio is the
  distortion.
- ``os.clock`` is CPU time, so the figures move with the load (the machine is a shared 2-core
  VM) like every timed figure; shares of the total move less.
- Time in ``redis.call`` is counted in the helper that made the call (the server's command and
  the Lua bridge together); ``bench/bench_claim_finish_ir.py`` has the instruction counts.
- The probes replace the real build nowhere: they live only in the temporary copy, which is
  put first on ``sys.path`` of a child process.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ("claim", "finish", "finish_claim", "push")

# the profiler, put at the top of the root include (keys.lua): every other include depends on
# it, so the resolver orders it first. FQP.child: the wrapped time of the running helper's
# callees so far (a stack kept in one number: each wrapper saves and restores it)
PROFILER = """
local FQP = {t = {}, child = 0}
-- the accounting after a wrapped call; returns the call's values as they came (their number
-- too: a value spliced into a redis.call's arguments must not grow trailing nils)
local function fq_prof_done(name, saved, t0, ...)
  local dt = os.clock() - t0
  local p = FQP
  local s = p.t[name]
  if s == nil then
    s = {0, 0, 0}
    p.t[name] = s
  end
  s[1] = s[1] + dt
  s[2] = s[2] + dt - p.child
  s[3] = s[3] + 1
  p.child = saved + dt
  return ...
end
local function fq_prof_wrap(name, f)
  return function(...)
    local saved = FQP.child
    FQP.child = 0
    return fq_prof_done(name, saved, os.clock(), f(...))
  end
end
local function fq_prof_flush(name, t0)
  local p = FQP
  local dt = os.clock() - t0
  p.t[name] = {dt, dt - p.child, 1}
  for k, v in pairs(p.t) do
    redis.call('HINCRBYFLOAT', 'fqprof', k .. ':incl', v[1])
    redis.call('HINCRBYFLOAT', 'fqprof', k .. ':self', v[2])
    redis.call('HINCRBY', 'fqprof', k .. ':n', v[3])
  end
  p.t = {}
  p.child = 0
end
local function fq_prof_empty() return 0 end
"""

# a helper, or a field of a helper table (``function FQ_DEPS.enter(``)
_FUNCTION_RE = re.compile(r"^(?:local function (fq_\w+)|function ([A-Z_]+\.\w+))\(")


def instrument(src: Path) -> int:
    """Rewrite the Lua of the tree copied to ``src`` (see the module docstring); returns the
    number of helpers wrapped."""
    lua = src / "fairque_redis" / "lua"
    include = lua / "_include"
    keys = include / "keys.lua"
    text = keys.read_text()
    at = text.index("]]") + 2  # after the docblock
    keys.write_text(text[:at] + "\n" + PROFILER + text[at:])
    wrapped = 0
    for path in sorted(include.glob("*.lua")):
        lines = path.read_text().splitlines()
        current: str | None = None
        for i, line in enumerate(lines):
            match = _FUNCTION_RE.match(line)
            if match and not re.search(r"\bend\s*$", line) and "fq_prof" not in line:
                current = match.group(1) or match.group(2)
                continue
            if current is not None and line.startswith("end"):
                # on the `end` line itself: the resolver ends a block at a line starting with
                # `end` and keeps that line, so the rebinding stays with its function
                lines[i] = f"{line} {current} = fq_prof_wrap('{current}', {current})"
                wrapped += 1
                current = None
        path.write_text("\n".join(lines) + "\n")
    for name in SCRIPTS:
        path = lua / f"{name}.lua"
        lines = path.read_text().splitlines()
        last = max(i for i, line in enumerate(lines) if line.startswith("--- @include"))
        lines.insert(last + 1, "local FQP_T0 = os.clock()")
        body = "\n".join(lines)
        # every return at the script's top level (column 0) writes the totals first
        body = re.sub(
            r"^return ", f"fq_prof_flush('SCRIPT {name}', FQP_T0)\nreturn ", body, flags=re.M
        )
        path.write_text(body + "\n")
    # the probe's own cost: an empty helper, wrapped, called from a script of its own
    (lua / "prof_probe.lua").write_text(
        "#!lua\n--[[ prof_probe: the profiler's cost per wrapped call (bench only) ]]\n"
        '--- @include "_include/keys"\n'
        "local f = fq_prof_wrap('probe', fq_prof_empty)\n"
        "local t0 = os.clock()\n"
        "for _ = 1, 100000 do f() end\n"
        "local plain = os.clock()\n"
        "for _ = 1, 100000 do fq_prof_empty() end\n"
        "local t1 = os.clock()\n"
        "fq_prof_flush('probe total', t0)\n"
        "return tostring(((plain - t0) - (t1 - plain)) / 100000)\n"
    )
    return wrapped


CHILD = r"""
import json, sys, time
import redis
from fairque_core import Message, Priority
from fairque_redis.backends.backend import RedisBackend

url, mode, tenants, batch, tasks, tag = sys.argv[1:7]
tenants, batch, tasks = int(tenants), int(batch), int(tasks)
r = redis.Redis.from_url(url)

def msg(i, u):
    return Message(task_id=f"{tag}-{i}", tenant=u, priority=Priority.NORMAL, body=b'{"n": 1}')

b = RedisBackend.from_url(url, queue=f"prof-{tag}")
if mode == "probe":
    from fairque_redis.scripting import scripts
    src = scripts.resolve("prof_probe")
    print(json.dumps({"probe": float(r.eval(src, 0))}))
    sys.exit(0)
if mode == "drain":
    for s in range(0, tasks, 1000):
        b.push_batch([msg(i, f"u{i % tenants}") for i in range(s, min(s + 1000, tasks))])
    # (the pushes above loaded the function library: nothing counted below loads it)
    r.delete("fqprof")
    r.config_resetstat()
    done, pend = 0, []
    while True:
        if pend:
            _, got = b.finish_and_claim(pend, worker_id="w", count=batch)
        else:
            got = b.claim(worker_id="w", count=batch)
        if not got:
            break
        pend = [(c.message.task_id, c.lease.token, None) for c in got]
        done += len(got)
    b.finish_batch(pend)
else:  # push: one message per call, every tenant active
    b.push_batch([msg(-1 - t, f"u{t}") for t in range(tenants)])
    r.delete("fqprof")
    r.config_resetstat()
    for i in range(tasks):
        b.push(msg(i, f"u{i % tenants}"))
    done = tasks
fcall = r.info("commandstats").get("cmdstat_fcall", {"usec": 0})["usec"]
prof = {k.decode(): float(v) for k, v in r.hgetall("fqprof").items()}
print(json.dumps({"done": done, "fcall_usec": fcall, "prof": prof}))
"""


def run_child(
    src: Path, url: str, mode: str, tenants: int, batch: int, tasks: int, build: str
) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    tag = f"{build}{mode}{tenants}x{batch}"  # a queue and ids of its own per run
    done = subprocess.run(
        [sys.executable, "-c", CHILD, url, mode, str(tenants), str(batch), str(tasks), tag],
        env=env,
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"the {build} build's {mode} run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def figures(prof: dict) -> dict[str, tuple[float, float, float]]:
    """name -> (inclusive s, self s, calls) from a run's ``fqprof`` hash."""
    out: dict[str, list[float]] = {}
    for key, value in prof["prof"].items():
        name, what = key.rsplit(":", 1)
        out.setdefault(name, [0.0, 0.0, 0.0])[{"incl": 0, "self": 1, "n": 2}[what]] = value
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def report(title: str, prof: dict, real: dict, probe: float, top: int) -> None:
    done = prof["done"]
    found = figures(prof)
    scripts = {k: v for k, v in found.items() if k.startswith("SCRIPT ")}
    helpers = {k: v for k, v in found.items() if not k.startswith("SCRIPT ")}
    total = sum(v[0] for v in scripts.values())
    calls = sum(v[2] for v in helpers.values())
    per = 1e6 / done
    print(f"\n{title}: {done:,} tasks")
    print(f"  the real scripts:    {real['fcall_usec'] / done:7.1f} µs per task (FCALL usec)")
    print(
        f"  the profiling build: {total * per:7.1f} µs per task, of which the probes "
        f"~{calls * probe * per:.1f} ({calls / done:.1f} wrapped calls per task, "
        f"{probe * 1e6:.2f} µs each)"
    )
    # self time net of each call's probe, never below zero; the scripts' own bodies too
    net = {k: (max(0.0, v[1] - v[2] * probe), v[0], v[2]) for k, v in helpers.items()}
    net.update({k: (max(0.0, v[1]), v[0], v[2]) for k, v in scripts.items()})
    whole = sum(v[0] for v in net.values()) or 1.0
    print(
        f"  {'helper (or script body)':34} {'self µs':>8} {'share':>6} {'incl µs':>8} {'calls':>7}"
    )
    for name, (self_t, incl, n) in sorted(net.items(), key=lambda kv: -kv[1][0])[:top]:
        print(
            f"  {name:34} {self_t * per:8.2f} {self_t / whole:6.1%} {incl * per:8.2f} "
            f"{n / done:7.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, nargs="+", default=[100, 1])
    parser.add_argument("--batch", type=int, default=50, help="tasks per claim and finish")
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks per drain")
    parser.add_argument("--push", type=int, default=2_000, help="one-message pushes (0: none)")
    parser.add_argument("--top", type=int, default=18, help="helpers printed per run")
    args = parser.parse_args()

    from fairque_redis.servers.embedded import EmbeddedValkey

    tmp = Path(tempfile.mkdtemp(prefix="fq-prof-"))
    try:
        src = tmp / "src"
        shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
        wrapped = instrument(src)
        print(f"profiling build: {wrapped} helpers wrapped (os.clock probes), in {src}")
        print(f"loadavg at start: {os.getloadavg()}")
        with EmbeddedValkey() as server:
            probe = run_child(src, server.url, "probe", 1, 1, 1, "p")["probe"]
            runs = [("drain", t, args.batch, args.tasks) for t in args.tenants]
            if args.push:
                runs.append(("push", 100, 1, args.push))
            for mode, tenants, batch, tasks in runs:
                real = run_child(ROOT / "src", server.url, mode, tenants, batch, tasks, "real")
                prof = run_child(src, server.url, mode, tenants, batch, tasks, "prof")
                what = (
                    f"drain, {tenants} tenants, claims and finish_claims of {batch}"
                    if mode == "drain"
                    else f"one-message pushes, {tenants} active tenants"
                )
                report(what, prof, real, probe, args.top)
        print(f"\nloadavg at end: {os.getloadavg()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
