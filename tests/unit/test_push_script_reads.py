"""ADR 39: push.lua opens the queue with ``meta = 'fair'``, so ``fq_meta`` leaves the queue-wide
limit state and the pause flag (``q.qlim``, ``q.qtat``, ``q.qhold``, ``q.paused``) unset. That is
only right while nothing push can reach reads them: the flattened script holds every helper push
can call (the resolver keeps the reachable ones), so no line of it outside ``fq_meta`` may name
them. A helper that starts reading one of them must make push read the full meta again."""

from __future__ import annotations

import re

from fairque_redis.scripting.scripts import resolve

SKIPPED_FIELDS = re.compile(r"\bq\.(qlim|qtat|qhold|paused)\b")


def _definition(script: str, name: str) -> tuple[int, int]:
    """Line span [start, end) of the top-level ``local function name`` in ``script``."""
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"local function {name}("))
    end = next(i for i in range(start + 1, len(lines)) if lines[i] == "end")
    return start, end + 1


def test_push_opens_the_queue_reading_the_fair_meta_fields_only() -> None:
    script = resolve("push")
    assert "fq_open(KEYS, ARGV, {meta = 'fair'" in script


def test_nothing_push_can_reach_reads_the_meta_fields_it_skips() -> None:
    script = resolve("push")
    start, end = _definition(script, "fq_meta")
    lines = script.splitlines()
    outside = [
        line
        for i, line in enumerate(lines)
        if not (start <= i < end)
        and not line.lstrip().startswith("--")
        and SKIPPED_FIELDS.search(line)
    ]
    assert outside == []
    # the check itself finds such a read: the claim, which reads the full meta, has them
    claim = resolve("claim")
    assert any(
        SKIPPED_FIELDS.search(line) and not line.lstrip().startswith("--")
        for line in claim.splitlines()
    )
