"""Worker subprocesses (``chaos_worker.py``) for the chaos tests, each ended by its own pid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["WorkerProcs", "wait_until"]

CHILD = Path(__file__).with_name("chaos_worker.py")


def wait_until(cond: Callable[[], bool], timeout: float, what: str, step: float = 0.02) -> float:
    """Poll ``cond`` until true; returns the seconds waited, AssertionError on timeout."""
    started = time.monotonic()
    while not cond():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)
    return time.monotonic() - started


class WorkerProcs:
    """Starts ``chaos_worker.py`` processes; ``cleanup()`` SIGKILLs any still running."""

    def __init__(self, url: str, queue: str, history: Path) -> None:
        self.url = url
        self.queue = queue
        self.history = history
        self.procs: list[subprocess.Popen[bytes]] = []
        self.stderr: dict[int, Path] = {}
        self._n = 0

    def start(self, **opts: Any) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, str(CHILD), "--url", self.url, "--queue", self.queue]
        cmd += ["--history", str(self.history)]
        for key, value in opts.items():
            cmd += [f"--{key.replace('_', '-')}", str(value)]
        env = {**os.environ, "FAIRQUE_DISABLE_PLUGIN_AUTOLOAD": "1"}
        # stderr to a file: a worker logging a warning per backend error must never block on
        # a full pipe
        self._n += 1
        err_path = self.history.with_name(f"{self.history.stem}.worker{self._n}.stderr")
        with err_path.open("wb") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env)
        self.stderr[proc.pid] = err_path
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != b"ready":
            proc.kill()
            proc.communicate(timeout=10)
            raise AssertionError(f"worker did not start: {line!r} {self.errors(proc)}")
        return proc

    def errors(self, proc: subprocess.Popen[bytes]) -> str:
        """The tail of what the worker wrote to stderr."""
        path = self.stderr.get(proc.pid)
        return path.read_text(errors="replace")[-3000:] if path and path.exists() else ""

    def stop(self, proc: subprocess.Popen[bytes], timeout: float = 15.0) -> dict[str, Any]:
        """SIGTERM, wait, and return the health the worker printed (exit status checked)."""
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, self.errors(proc)
        return dict(json.loads(out.decode().strip().splitlines()[-1]))

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)
