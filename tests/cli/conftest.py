"""Fixtures of the CLI tests: a server URL and a fresh queue name per test.

Two ways to run the CLI: :func:`run_cli` starts ``python -m fairque_cli`` in a child process
(what a user's shell runs; about a second of imports each), :func:`run_cli_here` calls the same
``main()`` in this process with the same environment, working directory and captured output
(milliseconds). Tests of what only a process shows (signals, exit on a server stop, several
processes at once, a console script's import) use the child; the rest run here.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from fairque_cli.main import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def data_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A private FAIRQUE_DATA_DIR per test: the shared local server a test starts (a command
    without --url, connect() without a URL) lives there and is stopped afterwards."""
    from fairque_redis.servers import dev_server

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


@contextlib.contextmanager
def _as_a_child_would(env: dict[str, str], cwd: Path) -> Iterator[None]:
    """This process's environment, directory, import path and ``fairque`` logger set as
    :func:`run_cli`'s child would see them, and put back afterwards (with the modules imported
    from ``cwd``, so a handler module of one test never answers another test's import)."""
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_path = list(sys.path)
    saved_modules = set(sys.modules)
    logger = logging.getLogger("fairque")
    saved_logger = (list(logger.handlers), logger.level, logger.propagate)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        root = str(cwd.resolve())
        for name in set(sys.modules) - saved_modules:
            file = getattr(sys.modules[name], "__file__", None) or ""
            if file.startswith(root + os.sep):
                del sys.modules[name]
        logger.handlers[:], level, logger.propagate = saved_logger
        logger.setLevel(level)


def run_cli_here(
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """:func:`run_cli` without the child: ``main(ARGS)`` in this process, with the child's
    environment and working directory, its stdout and stderr captured, and argparse's exit
    status (2) returned like the child's."""
    out, err = io.StringIO(), io.StringIO()
    with (
        _as_a_child_would(child_env(env), cwd or REPO),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = main(list(args), stdout=out)
        except SystemExit as exc:  # argparse refuses a value with exit status 2
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(
        ["fairque", *args], code, stdout=out.getvalue(), stderr=err.getvalue()
    )
