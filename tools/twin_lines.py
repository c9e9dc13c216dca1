"""Count the hand-written lines the sync/async twins still share.

For each pair (a sync module and its async twin) both files are normalised the same way:
``async `` and ``await `` are removed, runs of whitespace become one space, and blank lines,
comment lines and import statements (all their lines, found with :mod:`ast`) are dropped.
The lines common to both files are then counted from the matching blocks of
:class:`difflib.SequenceMatcher` (so a line counts once, and only where the two files agree in
order). Twins inside one module count too: a class ``AsyncX`` beside a class ``X`` (a sync
protocol and its async twin, say) is measured the same way. A file whose first lines say it is
GENERATED (written by ``tools/gen_sync.py`` and kept fresh by a CI check) holds no
hand-written line, so its pair counts 0.

    uv run python tools/twin_lines.py            # per pair and the total
    uv run python tools/twin_lines.py --show     # also print the shared lines
    uv run python tools/twin_lines.py --max 150  # exit 1 when the total is not below 150
"""

from __future__ import annotations

import argparse
import ast
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src"

PAIRS: tuple[tuple[str, str], ...] = (
    ("fairque_core/app/engine/queue.py", "fairque_core/app/engine/queue_async.py"),
    ("fairque_core/app/engine/host.py", "fairque_core/app/engine/host_async.py"),
    ("fairque_core/app/worker/worker.py", "fairque_core/app/worker/worker_async.py"),
    ("fairque_redis/backends/backend.py", "fairque_redis/backends/backend_async.py"),
    ("fairque_core/memory/model.py", "fairque_core/memory/async_model.py"),
    ("fairque_core/app/scheduler/scheduler.py", "fairque_core/app/scheduler/scheduler_async.py"),
    ("fairque_core/app/engine/reads.py", "fairque_core/app/engine/reads_async.py"),
    ("fairque_core/app/engine/schedules.py", "fairque_core/app/engine/schedules_async.py"),
    ("fairque_core/app/engine/results.py", "fairque_core/app/engine/results_async.py"),
    ("fairque_core/app/engine/acks.py", "fairque_core/app/engine/acks_async.py"),
    ("fairque_core/app/engine/intake.py", "fairque_core/app/engine/intake_async.py"),
    ("fairque_redis/scripting/objects.py", "fairque_redis/scripting/objects_async.py"),
    ("fairque_core/app/engine/handles.py", "fairque_core/app/engine/handles_async.py"),
    ("fairque_core/app/engine/batcher.py", "fairque_core/app/engine/batcher_async.py"),
    ("fairque_redis/backends/schedules.py", "fairque_redis/backends/schedules_async.py"),
    ("fairque_redis/partitioned/backend.py", "fairque_redis/partitioned/backend_async.py"),
    ("fairque_redis/partitioned/reads.py", "fairque_redis/partitioned/reads_async.py"),
    ("fairque_core/ports/backend.py", "fairque_core/ports/backend_async.py"),
    ("fairque_redis/durability/waiter.py", "fairque_redis/durability/waiter_async.py"),
    ("fairque_redis/backends/host.py", "fairque_redis/backends/host_async.py"),
    ("fairque_redis/backends/waits.py", "fairque_redis/backends/waits_async.py"),
    ("fairque_redis/partitioned/routing.py", "fairque_redis/partitioned/routing_async.py"),
    ("fairque_core/app/worker/served.py", "fairque_core/app/worker/served_async.py"),
    ("fairque_redis/backends/events.py", "fairque_redis/backends/events_async.py"),
    ("fairque_redis/partitioned/events.py", "fairque_redis/partitioned/events_async.py"),
    ("fairque_core/app/engine/events.py", "fairque_core/app/engine/events_async.py"),
)

HEADER_LINES = 5  # how far down a "generated" marker is looked for
_GENERATED = re.compile(
    r"\bGENERATED\b|DO NOT EDIT|\bgenerated\b.*\bgen_sync\b|\bgen_sync\b.*\bgenerated\b"
)
_ASYNC_WORDS = re.compile(r"\b(?:async|await)\s+")
_SPACES = re.compile(r"\s+")


def is_generated(text: str) -> bool:
    """True when one of the first lines says the file is generated."""
    return any(_GENERATED.search(line) for line in text.splitlines()[:HEADER_LINES])


def import_lines(text: str) -> set[int]:
    """1-based numbers of every line that belongs to an import statement."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def normalised(text: str) -> list[str]:
    """The file's countable lines, with async/await stripped and whitespace normalised."""
    skip = import_lines(text)
    out: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if number in skip:
            continue
        line = _SPACES.sub(" ", _ASYNC_WORDS.sub("", raw)).strip()
        if not line or line.startswith("#"):
            continue
        out.append(line)
    return out


def shared(a: list[str], b: list[str]) -> list[str]:
    """The lines of ``a`` that the matching blocks pair with identical lines of ``b``."""
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    common: list[str] = []
    for block in matcher.get_matching_blocks():
        common.extend(a[block.a : block.a + block.size])
    return common


def measure(sync_path: Path, async_path: Path) -> tuple[int, str, list[str]]:
    """(shared line count, a note, the shared lines) for one pair."""
    missing = [str(p.relative_to(ROOT)) for p in (sync_path, async_path) if not p.exists()]
    if missing:
        return 0, "missing: " + ", ".join(missing), []
    sync_text = sync_path.read_text(encoding="utf-8")
    async_text = async_path.read_text(encoding="utf-8")
    generated = [
        p.name for p, t in ((sync_path, sync_text), (async_path, async_text)) if is_generated(t)
    ]
    if generated:
        return 0, "generated: " + ", ".join(generated), []
    common = shared(normalised(sync_text), normalised(async_text))
    return len(common), "hand-written", common


def in_file_twins(path: Path) -> list[tuple[str, int, list[str]]]:
    """Twins inside one hand-written module: each class ``AsyncX`` beside a class ``X`` (a
    sync protocol and its async twin, say), as (``X ~ AsyncX``, shared count, the lines)."""
    text = path.read_text(encoding="utf-8")
    if is_generated(text):
        return []
    lines = text.splitlines()
    tree = ast.parse(text)
    classes = {
        node.name: "\n".join(lines[node.lineno - 1 : node.end_lineno])
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }
    out: list[tuple[str, int, list[str]]] = []
    for name, body in classes.items():
        twin = name.removeprefix("Async")
        if name.startswith("Async") and twin in classes:
            common = shared(normalised(classes[twin]), normalised(body))
            out.append((f"{twin} ~ {name}", len(common), common))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", action="store_true", help="print the shared lines of each pair")
    parser.add_argument("--max", type=int, default=None, help="fail unless the total is below MAX")
    args = parser.parse_args(argv)

    total = 0
    for sync_name, async_name in PAIRS:
        count, note, common = measure(ROOT / sync_name, ROOT / async_name)
        total += count
        print(f"{count:5d}  {sync_name} ~ {async_name}  ({note})")
        if args.show:
            for line in common:
                print(f"         | {line}")
    for path in sorted(ROOT.rglob("*.py")):
        for label, count, common in in_file_twins(path):
            total += count
            print(f"{count:5d}  {path.relative_to(ROOT)}: {label}  (in one file)")
            if args.show:
                for line in common:
                    print(f"         | {line}")
    print(f"{total:5d}  total shared hand-written lines")
    if args.max is not None and total >= args.max:
        print(f"FAIL: {total} >= {args.max}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
