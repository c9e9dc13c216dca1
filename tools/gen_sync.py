"""Generate the synchronous twins from their async sources: async is written once.

    uv run python tools/gen_sync.py          # rewrite every generated file
    uv run python tools/gen_sync.py --check  # exit 1 if any generated file is stale

Each source in :data:`PAIRS` goes through four steps:

1. lines ending in ``# unasync: remove`` are dropped (notes that only make sense in the source);
2. the ``unasync`` package removes ``async``/``await`` token by token and renames the names
   in :data:`NAMES` where they are code (``AsyncFairQueue`` -> ``FairQueue`` ...);
3. :data:`TEXT_RULES` rewrite what a token rename cannot reach: dotted names
   (``asyncio.sleep`` -> ``time.sleep``, ``redis.asyncio`` -> ``redis``) and the same names
   in docstrings and comments;
4. ruff sorts the imports and formats the result with the project's settings, and a header
   naming the source is put on top.

Write the async source so that both faces read well after these rules (no "asyncio" in prose,
no sync-only code). ``tests/unit/test_generated_sync.py`` runs ``--check``, so the test suite
(and CI) fails when a generated file was edited by hand or its source changed without
regeneration. See docs/adr/0021-async-source-sync-generated.md.
"""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import unasync

ROOT = Path(__file__).resolve().parent.parent

# async source -> generated sync file (paths from the repository root)
PAIRS: tuple[tuple[str, str], ...] = (
    ("src/fairque_core/app/engine/queue_async.py", "src/fairque_core/app/engine/queue.py"),
    ("src/fairque_core/app/engine/host_async.py", "src/fairque_core/app/engine/host.py"),
    ("src/fairque_redis/backends/backend_async.py", "src/fairque_redis/backends/backend.py"),
    ("src/fairque_redis/backends/schedules_async.py", "src/fairque_redis/backends/schedules.py"),
    (
        "src/fairque_core/app/scheduler/scheduler_async.py",
        "src/fairque_core/app/scheduler/scheduler.py",
    ),
    ("src/fairque_core/app/engine/reads_async.py", "src/fairque_core/app/engine/reads.py"),
    ("src/fairque_core/app/engine/schedules_async.py", "src/fairque_core/app/engine/schedules.py"),
    ("src/fairque_core/app/engine/results_async.py", "src/fairque_core/app/engine/results.py"),
    ("src/fairque_core/app/engine/acks_async.py", "src/fairque_core/app/engine/acks.py"),
    ("src/fairque_core/app/engine/intake_async.py", "src/fairque_core/app/engine/intake.py"),
    ("src/fairque_core/app/engine/handles_async.py", "src/fairque_core/app/engine/handles.py"),
    ("src/fairque_redis/partitioned/backend_async.py", "src/fairque_redis/partitioned/backend.py"),
    ("src/fairque_redis/scripting/objects_async.py", "src/fairque_redis/scripting/objects.py"),
    ("src/fairque_redis/partitioned/reads_async.py", "src/fairque_redis/partitioned/reads.py"),
    ("src/fairque_core/ports/backend_async.py", "src/fairque_core/ports/backend.py"),
    ("src/fairque_redis/durability/waiter_async.py", "src/fairque_redis/durability/waiter.py"),
    ("src/fairque_redis/backends/host_async.py", "src/fairque_redis/backends/host.py"),
    ("src/fairque_redis/backends/waits_async.py", "src/fairque_redis/backends/waits.py"),
    (
        "src/fairque_redis/partitioned/routing_async.py",
        "src/fairque_redis/partitioned/routing.py",
    ),
    ("src/fairque_core/app/worker/served_async.py", "src/fairque_core/app/worker/served.py"),
    ("src/fairque_redis/backends/events_async.py", "src/fairque_redis/backends/events.py"),
    ("src/fairque_redis/partitioned/events_async.py", "src/fairque_redis/partitioned/events.py"),
    ("src/fairque_core/app/engine/events_async.py", "src/fairque_core/app/engine/events.py"),
)

# Whole names, renamed in code (by unasync's tokenizer) and in prose (by TEXT_RULES).
# unasync itself already maps __aenter__/__aexit__, AsyncIterator and the like.
NAMES: dict[str, str] = {
    "AsyncFairQueue": "FairQueue",
    "AsyncQueueBackend": "QueueBackend",
    "AsyncClaimsWhenReady": "ClaimsWhenReady",
    "AsyncFinishesAndClaims": "FinishesAndClaims",
    "AsyncTakesIntake": "TakesIntake",
    "backend_async": "backend",
    "AsyncRedisBackend": "RedisBackend",
    "AsyncInMemoryBackend": "InMemoryBackend",
    "AsyncScript": "Script",
    "AsyncScheduleStore": "ScheduleStore",
    "AsyncRedisScheduleStore": "RedisScheduleStore",
    "AsyncScheduler": "Scheduler",
    "schedules_async": "schedules",
    "scheduler_async": "scheduler",
    "aclose": "close",
    "open_async_backend": "open_backend",
    "queue_async": "queue",
    "host_async": "host",
    "AsyncReadMixin": "ReadMixin",
    "AsyncScheduleMixin": "ScheduleMixin",
    "reads_async": "reads",
    "AsyncResultMixin": "ResultMixin",
    "AsyncTaskHandle": "TaskHandle",
    "AsyncResultSource": "ResultSource",
    "results_async": "results",
    "AsyncAckMixin": "AckMixin",
    "acks_async": "acks",
    "AsyncIntakeMixin": "IntakeMixin",
    "intake_async": "intake",
    "handles_async": "handles",
    "AsyncPartitionedBackend": "PartitionedBackend",
    "AsyncPartitionReads": "PartitionReads",
    "AsyncPartition": "Partition",
    "AsyncPushBatcher": "PushBatcher",
    "batcher_async": "batcher",
    "objects_async": "objects",
    "AsyncReplicaWaiter": "ReplicaWaiter",
    "waiter_async": "waiter",
    "async_pool_of": "pool_of",
    "async_wait_piece": "wait_piece",
    "AsyncBackendHost": "BackendHost",
    "AsyncWaitMixin": "WaitMixin",
    "waits_async": "waits",
    "AsyncPartitionRouting": "PartitionRouting",
    "routing_async": "routing",
    "AsyncServedQueues": "ServedQueues",
    "served_async": "served",
    "AsyncWakeAny": "WakeAny",
    "AsyncEventsMixin": "EventsMixin",
    "AsyncPartitionEvents": "PartitionEvents",
    "AsyncEventStream": "EventStream",
    "AsyncEventMixin": "EventMixin",
    "events_async": "events",
}

# Regular expressions applied to the whole text after the token pass, in this order.
TEXT_RULES: tuple[tuple[str, str], ...] = (
    (r"^import asyncio\n", ""),
    (r"\basyncio\.sleep\b", "time.sleep"),
    (r"\bredis\.asyncio\.cluster\b", "redis.cluster"),
    (r"\bredis\.asyncio\b", "redis"),
    (r"\basynchronous=True\b", "asynchronous=False"),
    *((rf"\b{re.escape(old)}\b", new) for old, new in NAMES.items()),
)

REMOVE_MARK = "# unasync: remove"

HEADER = (
    "# GENERATED from {source} by tools/gen_sync.py: do not edit this file.\n"
    "# Edit the source, then run `uv run python tools/gen_sync.py` (CI checks it is fresh).\n"
)


def _unasync_text(text: str) -> str:
    """``text`` through the unasync package's token rules (async/await out, NAMES renamed)."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp, "_async", "module.py")
        source.parent.mkdir()
        source.write_text(text, encoding="utf-8")
        rule = unasync.Rule("/_async/", "/_sync/", additional_replacements=NAMES)
        unasync.unasync_files([str(source)], [rule])
        return Path(tmp, "_sync", "module.py").read_text(encoding="utf-8")


def _ruff(args: list[str], text: str, target: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--stdin-filename", target, "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if done.returncode != 0 or not done.stdout:
        raise SystemExit(f"ruff {' '.join(args)} failed on {target}:\n{done.stderr}")
    return done.stdout


def generate(source: str, target: str) -> str:
    """The text ``target`` must have, made from ``source``."""
    text = (ROOT / source).read_text(encoding="utf-8")
    kept = [
        line for line in text.splitlines(keepends=True) if not line.rstrip().endswith(REMOVE_MARK)
    ]
    text = _unasync_text("".join(kept))
    for pattern, replacement in TEXT_RULES:
        text = re.sub(pattern, replacement, text, flags=re.MULTILINE)
    header = HEADER.format(source=source)
    if len(header.splitlines()[0]) > 100:  # the line limit: name the tool on a line of its own
        header = header.replace(" by tools/gen_sync.py:", "\n# by tools/gen_sync.py:", 1)
    text = header + text
    text = _ruff(["check", "--fix", "--exit-zero", "--quiet", "--select", "I,F401"], text, target)
    return _ruff(["format", "--quiet"], text, target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a file is stale"
    )
    args = parser.parse_args(argv)
    stale: list[str] = []
    for source, target in PAIRS:
        wanted = generate(source, target)
        path = ROOT / target
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current == wanted:
            continue
        if args.check:
            stale.append(target)
            diff = difflib.unified_diff(
                current.splitlines(keepends=True),
                wanted.splitlines(keepends=True),
                f"{target} (on disk)",
                f"{target} (generated from {source})",
            )
            sys.stdout.writelines(list(diff)[:60])
        else:
            path.write_text(wanted, encoding="utf-8")
            print(f"wrote {target} (from {source})")
    if stale:
        print(
            f"\nstale generated file(s): {', '.join(stale)}; "
            "run `uv run python tools/gen_sync.py` and commit the result",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
