"""What the sync/async twins share, measured (issue 10's target: fewer than 150 hand-written
lines). The count covers every twin: each ``*_async`` module (and ``async_*`` of the Redis
adapter) is in ``tools/twin_lines.py``'s pairs, and an ``AsyncX`` class beside an ``X`` class in
one module is measured too, so a new hand-kept twin cannot slip past the measure."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "twin_lines.py"


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("twin_lines", TOOL)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_async_module_is_measured() -> None:
    tool = load_tool()
    measured = {async_name for _sync, async_name in tool.PAIRS}
    src = ROOT / "src"
    twins = {
        str(p.relative_to(src))
        for p in [*src.rglob("*_async.py"), *src.rglob("async_*.py")]
        if p.name != "__init__.py"
    }
    assert twins, "no async module found: the layout changed"
    assert twins <= measured, sorted(twins - measured)
    for sync_name, async_name in tool.PAIRS:
        assert (src / sync_name).exists(), sync_name
        assert (src / async_name).exists(), async_name


# Issue 10's target is fewer than 150. Measured with the twins inside one module too it was
# 250; the backend port's protocols (64 lines) and the replica waiters (44) are now generated
# from their async sources (ADR 21), so it was 142; the workers' listener hand-off (ADR 38,
# health counting what the listener claimed) added 3, so it was 145 and the target is met.
# ADR 51 (a handler's thread books its end and runs the next buffered task) added each
# worker's run-one-then-the-next loop, 3 lines once the booking itself moved to the driver
# (WorkerDriver._book_end): 148 at this writing, still under issue 10's 150. The in-file twins
# left are the schedule stores. This bound keeps the figure from growing; lower it as twins go.
SHARED_LINES_BOUND = 149


def test_shared_hand_written_lines_do_not_grow() -> None:
    run = subprocess.run(
        [sys.executable, str(TOOL), "--max", str(SHARED_LINES_BOUND)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    total = int(run.stdout.strip().splitlines()[-1].split()[0])
    assert total < SHARED_LINES_BOUND


def test_twins_inside_one_module_are_measured(tmp_path: Path) -> None:
    tool = load_tool()
    body = "\n".join(f"        x{i} = compute({i})" for i in range(12))
    module = tmp_path / "ports.py"
    module.write_text(
        f"class Port:\n    def f(self):\n{body}\n\n\n"
        f"class AsyncPort:\n    async def f(self):\n{body}\n",
        encoding="utf-8",
    )
    [(label, count, _lines)] = tool.in_file_twins(module)
    assert label == "Port ~ AsyncPort"
    assert count == 13  # def f and the 12 copied statements (the class lines differ)


def test_the_measure_sees_a_copied_body(tmp_path: Path) -> None:
    tool = load_tool()
    body = "\n".join(f"    x{i} = compute({i})" for i in range(40))
    sync_file = tmp_path / "a.py"
    async_file = tmp_path / "a_async.py"
    sync_file.write_text(f"def f():\n{body}\n", encoding="utf-8")
    async_file.write_text(f"async def f():\n{body.replace('compute', 'await compute')}\n")
    count, note, _lines = tool.measure(sync_file, async_file)
    assert note == "hand-written"
    assert count == 41  # the def line (async stripped) and the 40 copied statements
