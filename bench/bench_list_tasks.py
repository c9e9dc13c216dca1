"""``list_tasks`` on a big queue (ADR 70): the server time of a page of 50 of one tenant's failed
tasks, and of the queue's newest page and the page after it, on an embedded Valkey (prints
numbers; not a test; issue 31's target: under 20 ms).

    uv run --no-sync python bench/bench_list_tasks.py [--tasks 1000000] [--tenants 10000]

The queue is filled with ``--tasks`` tasks that ended over ``--tenants`` tenants (half failed,
half finished, end times one millisecond apart): one failed and one finished task are made by
the scripts (push, claim, fail or finish), and their records and index entries are copied,
pipelined, under new ids, tenants and times -- the layout ``lua/_include/record.lua`` writes,
without a million script calls to make it. Then each page is read 200 times; from ``INFO
commandstats`` (reset before) the server's time per ``FCALL`` (the script, its inner
commands included), and on the client the wall time per call (median and p99).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

import redis

from fairque_core.domain.enums import Priority, TaskState
from fairque_core.domain.models import Message
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.servers.embedded import EmbeddedValkey

CALLS = 200
CHUNK = 5000


def _template(backend: RedisBackend, raw: Any, prefix: str, state: TaskState) -> dict[bytes, bytes]:
    task_id = f"template-{state.value}"
    backend.push(
        Message(task_id=task_id, tenant="template", priority=Priority.NORMAL,
                body=b'{"order": 1}', created_at=time.time(), max_retries=0)
    )
    [c] = backend.claim(worker_id="bench-worker")
    if state is TaskState.FAILED:
        backend.fail(task_id, c.lease.token, retry_delay=None, reason="ValueError: boom",
                     error='{"type":"ValueError","message":"boom","traceback":"..."}')
    else:
        backend.finish(task_id, c.lease.token, b"1")
    fields: dict[bytes, bytes] = raw.hgetall(f"{prefix}task:{task_id}")
    for name in (b"exp", b"tok"):
        fields.pop(name, None)
    return fields


def fill(backend: RedisBackend, raw: Any, prefix: str, tasks: int, tenants: int) -> float:
    templates = {s: _template(backend, raw, prefix, s) for s in (TaskState.FAILED,
                                                                  TaskState.FINISHED)}
    start = time.perf_counter()
    base_ms = int(time.time() * 1000) - tasks
    pipe = raw.pipeline(transaction=False)
    for i in range(tasks):
        state = TaskState.FAILED if i % 2 == 0 else TaskState.FINISHED
        tenant = f"u{(i // 2) % tenants}"
        task_id = f"t{i:07d}"
        ms = base_ms + i
        fields = dict(templates[state])
        fields[b"u"] = tenant.encode()
        fields[b"mv" if state is TaskState.FAILED else b"en"] = str(ms).encode()
        pipe.hset(f"{prefix}task:{task_id}", mapping=fields)
        pipe.zadd(f"{prefix}ix:{state.value}", {task_id: ms})
        pipe.zadd(f"{prefix}ix:{state.value}:{tenant}", {task_id: ms})
        if state is TaskState.FAILED:
            pipe.zadd(f"{prefix}dlq", {task_id: ms})
        if i % CHUNK == CHUNK - 1:
            pipe.execute()
    pipe.execute()
    return time.perf_counter() - start


def measure(raw: Any, call: Any) -> tuple[float, float, float, int]:
    raw.config_resetstat()
    walls = []
    got = 0
    for _ in range(CALLS):
        t0 = time.perf_counter()
        items, _cursor = call()
        walls.append((time.perf_counter() - t0) * 1000)
        got = len(items)
    stats = raw.info("commandstats")
    script = stats.get("cmdstat_fcall") or stats.get("cmdstat_evalsha") or {}
    server_ms = float(script.get("usec_per_call", 0.0)) / 1000
    walls.sort()
    return server_ms, statistics.median(walls), walls[int(0.99 * (len(walls) - 1))], got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=10_000)
    opts = parser.parse_args()
    name = "list" + uuid.uuid4().hex[:8]
    prefix = f"fq:{{{name}}}:"
    with EmbeddedValkey() as server:
        raw = redis.Redis.from_url(str(server.url))
        backend = RedisBackend.from_url(str(server.url), queue=name)
        seconds = fill(backend, raw, prefix, opts.tasks, opts.tenants)
        memory = raw.info("memory")["used_memory"]
        print(f"filled {opts.tasks} ended tasks over {opts.tenants} tenants in {seconds:.0f} s "
              f"(used_memory {memory / 2**20:.0f} MiB)")
        tenant = f"u{opts.tenants // 2}"
        first_page = backend.list_tasks(limit=50)
        cases = {
            f"failed of {tenant}, 50": lambda: backend.list_tasks(
                state=TaskState.FAILED, tenant=tenant, limit=50
            ),
            "failed, newest 50": lambda: backend.list_tasks(state=TaskState.FAILED, limit=50),
            "all states, newest 50": lambda: backend.list_tasks(limit=50),
            "all states, 2nd page": lambda: backend.list_tasks(limit=50, cursor=first_page[1]),
        }
        print(f"{'page':>28} {'items':>6} {'server ms':>10} {'wall ms p50':>12} {'p99':>8}")
        for label, call in cases.items():
            server_ms, p50, p99, got = measure(raw, call)
            print(f"{label:>28} {got:>6} {server_ms:>10.3f} {p50:>12.3f} {p99:>8.3f}")
        backend.close()


if __name__ == "__main__":
    main()
