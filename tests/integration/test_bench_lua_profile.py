"""bench/bench_lua_profile.py: its profiling build still loads and profiles the real scripts.

The profiler rewrites a copy of the Lua sources by pattern (every multi-line ``local function
fq_*`` of the includes, the top-level returns of four scripts). A change of the sources'
shape could silently leave helpers unwrapped or break the build; this runs the tool's own
pieces on a real Valkey: the copy is made and instrumented, a drain of 60 tasks over 3
tenants and a few pushes run on it, and the figures name the helpers that must have run.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from fairque_redis.servers.embedded import EmbeddedValkey

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def profiled(
    tmp_path_factory: pytest.TempPathFactory, load_bench: Callable[[str], ModuleType]
) -> tuple[ModuleType, Path, int]:
    tool = load_bench("bench_lua_profile")
    src = tmp_path_factory.mktemp("prof") / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    return tool, src, tool.instrument(src)


def test_every_multi_line_helper_is_wrapped(profiled: tuple[ModuleType, Path, int]) -> None:
    tool, src, wrapped = profiled
    include = src / "fairque_redis" / "lua" / "_include"
    defined = 0
    for path in include.glob("*.lua"):
        for line in path.read_text().splitlines():
            match = tool._FUNCTION_RE.match(line)
            if match and not line.rstrip().endswith("end") and "fq_prof" not in line:
                defined += 1
    assert wrapped == defined > 50


def test_the_profiling_build_runs_and_names_the_helpers(
    profiled: tuple[ModuleType, Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    tool, src, _ = profiled
    monkeypatch.delenv("FAIRQUE_ACCEL_OFF", raising=False)
    with EmbeddedValkey() as server:
        probe = tool.run_child(src, server.url, "probe", 1, 1, 1, "p")["probe"]
        drain = tool.run_child(src, server.url, "drain", 3, 10, 60, "t")
        plain = tool.run_child(src, server.url, "push", 3, 1, 5, "p")
        monkeypatch.setenv("FAIRQUE_ACCEL_OFF", "plain_push")  # push.lua (ADR 80's switch)
        push = tool.run_child(src, server.url, "push", 3, 1, 5, "t")
    assert 0 < probe < 1e-3  # seconds per wrapped call: positive, far below a millisecond
    assert drain["done"] == 60
    found = tool.figures(drain)
    # the drain ran claims and finish_claims; their helpers ran about once per call
    assert found["SCRIPT finish_claim"][2] >= 5
    assert found["fq_claim"][2] >= 6
    assert found["fq_finish"][2] >= 5
    assert found["fq_claim"][0] > 0
    assert tool.figures(plain)["SCRIPT push_plain"][2] == 5  # the plain push, on by default
    pushes = tool.figures(push)
    assert pushes["SCRIPT push"][2] == 5
    assert pushes["fq_push_ready"][2] == 5
