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


@pytest.fixture(autouse=True)
def data_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A private FAIRQUE_DATA_DIR per test: the shared local server a test starts (a command
    without --url, connect() without a URL) lives there and is stopped afterwards."""
    from fairque_redis import dev_server

    path = tmp_path_factory.mktemp("fairque-data")
    monkeypatch.setenv(dev_server.DATA_DIR_ENV, str(path))
    yield path
    dev_server.stop()


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process: no FAIRQUE_ settings but the data dir, plus extra."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("FAIRQUE_") or k == "FAIRQUE_DATA_DIR"
    }
    env.update(extra or {})
    return env


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
    full_env = child_env(env)
    return subprocess.run(
        [sys.executable, "-m", "fairque_cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd or REPO,
        timeout=timeout,
        check=False,
    )
