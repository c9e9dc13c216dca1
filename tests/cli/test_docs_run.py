"""Every ```python block of README.md and docs/*.md runs on its own, in a fresh interpreter.

Each block runs as ``python -c BLOCK`` with ``FAIRQUE_DATA_DIR`` set to a temporary directory
(so ``connect()`` with no URL starts a private shared local server, stopped afterwards by the
``data_dir`` fixture) and no other ``FAIRQUE_`` setting. A block that needs something a test
cannot give (a worker running until SIGTERM, a cluster at a made-up address) is preceded by a
``<!-- not-run: reason -->`` comment, which this test honours and requires a reason in.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, child_env

pytestmark = [pytest.mark.redis, pytest.mark.timeout(300)]

BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(.*?)\s*-->\s*$")
# every page of the docs site, in subfolders too (docs/reference/); not the ADRs, records of
# their day whose quoted imports may since be gone
DOCS = [
    REPO / "README.md",
    *sorted(p for p in (REPO / "docs").rglob("*.md") if "adr" not in p.relative_to(REPO).parts),
]


def blocks(path: Path) -> list[tuple[int, str, str | None]]:
    """``(line, code, not-run reason or None)`` of every python block of ``path``."""
    text = path.read_text(encoding="utf-8")
    out = []
    for match in BLOCK.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = NOT_RUN.search(before)
        line = text.count("\n", 0, match.start()) + 1
        out.append((line, match.group(1), marker.group(1) if marker else None))
    return out


CASES_RAW = [(path, line, code, reason) for path in DOCS for line, code, reason in blocks(path)]
CASES = [
    pytest.param(path, line, code, reason, id=f"{path.relative_to(REPO)}:{line}")
    for path, line, code, reason in CASES_RAW
]


def test_there_are_blocks_to_run() -> None:
    assert sum(reason is None for *_rest, reason in CASES_RAW) >= 10


@pytest.mark.parametrize(("path", "line", "code", "reason"), CASES)
def test_block_runs_on_its_own(
    path: Path, line: int, code: str, reason: str | None, data_dir: Path
) -> None:
    if reason is not None:
        assert reason, f"{path.name}:{line}: a not-run marker needs a reason"
        pytest.skip(f"not-run: {reason}")
    env = child_env({"FAIRQUE_DATA_DIR": str(data_dir), "FAIRQUE_DISABLE_PLUGIN_AUTOLOAD": "1"})
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=data_dir,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"{path.name}:{line} failed:\n{proc.stderr[-3000:]}"
