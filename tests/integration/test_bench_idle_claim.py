"""bench/bench_idle_claim.py runs and prints what it claims to, against a real Valkey: the
idle claim's server time and the commands it ran (the five of ADR 59), in a few seconds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.redis, pytest.mark.usefixtures("accelerators_on")]


def test_the_bench_prints_the_idle_claims_cost_and_commands() -> None:
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "bench_idle_claim.py"),
            "--calls",
            "50",
            "--rounds",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    line = next(line for line in run.stdout.splitlines() if line.strip().startswith("this"))
    found = re.search(r"([\d.]+) µs per claim, +([\d.]+) commands per claim \((.*)\)", line)
    assert found is not None, line
    assert float(found.group(1)) > 0
    assert float(found.group(2)) == 5.0
    assert found.group(3) == "llen 1, time 1, zcard 1, zrange 2"
