"""A task function's tenant is required for a type checker too, not only at run time.

``fn(...)``, ``fn.create(...)`` and ``fn.step(...)`` of an ``@task`` function raise TypeError
without a tenant; their signatures (``fairque_core.app.worker.handlers.TaskFunction``) make mypy
say so before the code runs, while the typed task options (``task_id``, ``priority`` ...) still
check. The removed ``user_id=`` keyword (ADR 23) names no tenant. This runs mypy
(``mypy.api``, strict) on a snippet and compares the lines it flags with the lines marked ``# E``.
"""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

SNIPPET = """\
from fairque_core import Task, task


@task
def add(a: int, b: int) -> int:
    return a + b


ok: list[Task] = [
    add("acme", 1, 2),
    add("acme", a=1, b=2, task_id="t1", priority=3),
    add.create("acme", 1, b=2, depends_on=["t0"]),
    add.step("acme", b=2),
]
add(user_id="acme", a=1, b=2)  # E: removed (ADR 23), no tenant
add.step(user_id="acme", b=2)  # E
add(a=1, b=2)  # E: no tenant
add()  # E
add.create()  # E
add.create(a=1, b=2, priority=2)  # E
add.step(b=2)  # E
add("acme", 1, 2, task_id=5)  # E: an option keeps its type
add.create("acme", headers=["x"])  # E
"""


def _flagged(out: str, name: str) -> set[int]:
    return {int(m) for m in re.findall(rf"^{re.escape(name)}:(\d+): error:", out, re.M)}


def test_mypy_rejects_a_task_call_without_a_tenant(tmp_path: Path) -> None:
    from mypy import api

    snippet = tmp_path / "snippet.py"
    snippet.write_text(SNIPPET)
    config = tmp_path / "mypy.ini"
    config.write_text(f"[mypy]\nmypy_path = {SRC}\n")
    out, err, status = api.run(
        [
            "--strict",
            "--config-file",
            str(config),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-error-summary",
            "--show-absolute-path",
            str(snippet),
        ]
    )
    marked = {n for n, line in enumerate(SNIPPET.splitlines(), 1) if "# E" in line}
    assert len(marked) == 9
    assert status == 1, (out, err)
    assert _flagged(out, str(snippet)) == marked, out
