"""Fixtures of the CLI tests: a server URL and a fresh queue name per test."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def server_url(valkey_server: Any) -> str:
    """The URL of the session's embedded Valkey (from tests/conftest.py)."""
    return str(valkey_server.url)


@pytest.fixture
def queue_name() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"


def run_cli(
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """``python -m fairque_cli ARGS`` in a child process (what a user's shell runs)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRQUE_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "fairque_cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd or REPO,
        timeout=timeout,
        check=False,
    )
