"""The local server's liveness check (fairque_redis.servers.dev_server): a zombie is not alive."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fairque_redis.servers import dev_server


def _wait_zombie(pid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            if stat.read().rpartition(b")")[2].split()[0] == b"Z":
                return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not exit")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_an_exited_process_not_reaped_yet_is_not_alive() -> None:
    # a child that exits at once and is not waited for stays a zombie: os.kill(pid, 0)
    # still succeeds on it, as on a daemonised server that init has not reaped yet
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        _wait_zombie(child.pid)
        os.kill(child.pid, 0)  # the process table still holds it
        assert not dev_server._pid_alive(child.pid)
    finally:
        child.wait()
    assert not dev_server._pid_alive(child.pid)


def test_a_running_process_is_alive() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert dev_server._pid_alive(child.pid)
        assert dev_server._pid_alive(os.getpid())
    finally:
        child.kill()
        child.wait()


def test_a_name_with_a_parenthesis_and_spaces_reads_the_state_after_it(tmp_path: object) -> None:
    # the state field follows the last ')' of /proc/<pid>/stat, whatever the command's name
    link = f"{tmp_path}/odd) name"
    os.symlink(sys.executable, link)
    child = subprocess.Popen([link, "-c", "import time; time.sleep(30)"])
    try:
        assert dev_server._pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()


def test_no_pid_is_not_alive() -> None:
    assert not dev_server._pid_alive(0)
    assert not dev_server._pid_alive(-1)


def test_a_relative_data_dir_is_made_absolute(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Valkey runs in a directory of its own: a relative --dir never started (a 15 s wait)."""

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(dev_server.DATA_DIR_ENV, "reldata")
    assert dev_server.data_dir() == tmp_path / "reldata"


def test_stop_without_a_server_creates_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:

    root = tmp_path / "never-set-up"
    monkeypatch.setenv(dev_server.DATA_DIR_ENV, str(root))
    assert dev_server.stop() is None
    assert not root.exists()  # it made the directory and its lock file
