"""The synchronous engine and Redis backend are generated from their async sources
(tools/gen_sync.py, ADR 0021): fail when a generated file is stale or edited by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_sync_files_are_fresh() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_sync.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, (
        "a generated sync file is stale: run `uv run python tools/gen_sync.py` and commit\n"
        + done.stdout
        + done.stderr
    )


def test_generated_files_say_so() -> None:
    for generated in (
        "src/fairque_core/app/engine/queue.py",
        "src/fairque_redis/backends/backend.py",
    ):
        head = (ROOT / generated).read_text(encoding="utf-8").splitlines()[:2]
        assert head[0].startswith("# GENERATED from "), generated
        assert "tools/gen_sync.py" in " ".join(head), generated
