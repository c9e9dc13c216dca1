"""What the task record and the browse indexes (ADR 70) cost per task: bytes kept and server time
of the drain, before (a commit without them) and after (this tree), in one run on one embedded
Valkey (prints numbers; not a test).

    uv run --no-sync python bench/bench_task_record.py [--tasks N] [--base REF] [--rounds R]

The base commit's ``src/`` is exported with ``git archive`` into a temporary directory and run
in a child process (``PYTHONPATH``), this tree in another; both on the same server, each on its
own fresh queues. Each child, per round:

* the drain: N tasks over 20 tenants pushed, then claimed 50 at a time by one worker id and
  finished in one ``finish_batch``; from ``INFO commandstats`` (reset before the drain): the
  server's time in the script calls (FCALL, their inner commands included) and the commands it
  ran (inner ones included), per task;
* the bytes: ``MEMORY USAGE`` of 200 finished task records (mean) and, after, of the index keys
  (``ix:*``), per task;
* a story: 200 tasks that fail twice (with a failure record like a handler's: ~1.5 kB of
  traceback) and then finish; the mean ``MEMORY USAGE`` of their records.

Medians over the rounds, and the ratios after/before. The server time is noisy on this shared
2-core machine: compare the ratio, inside one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TENANTS = 20
SAMPLE = 200
STORY = 200


def _error_record() -> str:
    """A failure record as the engine stores it (outcomes.error_record of a real raise)."""
    from fairque_core.domain.outcomes import error_record

    def deep(n: int) -> None:
        if n == 0:
            raise ValueError("the handler could not reach the payment service " * 3)
        deep(n - 1)

    try:
        deep(12)
    except ValueError as exc:
        return error_record(exc)
    raise AssertionError


_SCRIPTS = ("cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_evalsha", "cmdstat_eval")


def _usec_and_calls(client: Any) -> tuple[int, int]:
    """The server's time in script calls (their inner commands included) and the commands
    it ran (the scripts' inner ones included), since the last reset."""
    stats = client.info("commandstats")
    usec = sum(int(s["usec"]) for name, s in stats.items() if name in _SCRIPTS)
    calls = sum(
        int(s["calls"]) for name, s in stats.items() if not name.endswith(("info", "config"))
    )
    return usec, calls


def child(url: str, tasks: int) -> dict[str, float]:
    import redis

    from fairque_core.domain.enums import Priority
    from fairque_core.domain.models import Message
    from fairque_redis.backends.backend import RedisBackend

    raw = redis.Redis.from_url(url)
    name = "rec" + uuid.uuid4().hex[:10]
    backend = RedisBackend.from_url(url, queue=name)
    now = time.time()
    for start in range(0, tasks, 1000):
        backend.push_batch(
            [
                Message(
                    task_id=f"t{i}",
                    tenant=f"u{i % TENANTS}",
                    priority=Priority.NORMAL,
                    body=b'{"order": 12345, "items": [1, 2, 3]}',
                    created_at=now,
                )
                for i in range(start, min(tasks, start + 1000))
            ]
        )
    raw.config_resetstat()
    done = 0
    while True:
        claimed = backend.claim(count=50, worker_id="bench-worker")
        if not claimed:
            break
        backend.finish_batch([(c.message.task_id, c.lease.token, b"1") for c in claimed])
        done += len(claimed)
    usec, calls = _usec_and_calls(raw)
    assert done == tasks
    prefix = f"fq:{{{name}}}:"
    record = statistics.mean(
        raw.memory_usage(f"{prefix}task:t{i}", samples=0) or 0 for i in range(SAMPLE)
    )
    index = sum(
        raw.memory_usage(k, samples=0) or 0 for k in raw.scan_iter(match=f"{prefix}ix:*")
    )
    # the story: two failed attempts with a handler's failure record, then a finish
    error = _error_record()
    story = RedisBackend.from_url(url, queue=name + "s")
    story.push_batch(
        [
            Message(task_id=f"s{i}", tenant="u", priority=Priority.NORMAL, body=b"{}",
                    created_at=now, max_retries=5)
            for i in range(STORY)
        ]
    )
    for _ in range(2):
        for c in story.claim(count=STORY, worker_id="bench-worker"):
            story.fail(c.message.task_id, c.lease.token, retry_delay=0, reason="x", error=error)
    claimed = story.claim(count=STORY, worker_id="bench-worker")
    story.finish_batch([(c.message.task_id, c.lease.token, b"1") for c in claimed])
    sprefix = f"fq:{{{name}s}}:"
    story_bytes = statistics.mean(
        raw.memory_usage(f"{sprefix}task:s{i}", samples=0) or 0 for i in range(STORY)
    )
    backend.close()
    story.close()
    return {
        "server_us_per_task": usec / tasks,
        "commands_per_task": calls / tasks,
        "record_bytes": record,
        "index_bytes_per_task": index / tasks,
        "story_record_bytes": story_bytes,
    }


def export(ref: str) -> Path:
    """``ref``'s ``src/`` in a temporary directory (``git archive``; nothing else touched)."""
    where = Path(tempfile.mkdtemp(prefix="fairque-base-"))
    data = subprocess.run(
        ["git", "archive", "--format=tar", ref, "src"], cwd=HERE.parent, check=True,
        capture_output=True,
    ).stdout
    archive = where / "src.tar"
    archive.write_bytes(data)
    with tarfile.open(archive) as tar:
        tar.extractall(where, filter="data")
    return where / "src"


def run(src: Path | None, url: str, tasks: int) -> dict[str, float]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    out = subprocess.run(
        [sys.executable, __file__, "--child", url, "--tasks", str(tasks)],
        env=env, check=True, capture_output=True, text=True,
    )
    got: dict[str, float] = json.loads(out.stdout)
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", default="abe4f04", help="the commit before (default: the "
                        "last one without the task record)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        print(json.dumps(child(opts.child, opts.tasks)))
        return
    from fairque_redis.servers.embedded import EmbeddedValkey

    base = export(opts.base)
    rows: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with EmbeddedValkey() as server:
        url = str(server.url)
        for r in range(opts.rounds):
            order = [("before", base), ("after", None)]
            for label, src in order if r % 2 == 0 else reversed(order):
                rows[label].append(run(src, url, opts.tasks))
    keys = list(rows["after"][0])
    print(f"{opts.tasks} tasks drained (claim 50, finish_batch), {opts.rounds} rounds, "
          f"before = {opts.base}, medians:")
    print(f"{'':>24} {'before':>10} {'after':>10} {'after/before':>13}")
    for key in keys:
        b = statistics.median(x[key] for x in rows["before"])
        a = statistics.median(x[key] for x in rows["after"])
        ratio = f"{a / b:.2f}" if b else "-"
        print(f"{key:>24} {b:>10.1f} {a:>10.1f} {ratio:>13}")


if __name__ == "__main__":
    main()
