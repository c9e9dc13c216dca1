"""Worker processes for the acceptance tests of limits (``test_flow_control.py``, ADR 28, and
``test_key_limits_workers.py``, ADR 79): ``flow_child.py`` workers (no prefetch) that log every
handler start and end as JSON lines, and the readers of that log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CHILD = Path(__file__).with_name("flow_child.py")


class Workers:
    """Worker subprocesses of one test, stopped (SIGTERM, then SIGKILL) by their own pids."""

    def __init__(
        self, url: str, queue: str, log: Path, *, cluster: bool = False, name: str = "flow"
    ) -> None:
        self.url, self.queue, self.log = url, queue, log
        self.cluster, self.name = cluster, name
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, n: int, concurrency: int) -> None:
        env = {**os.environ, "FAIRQUE_DISABLE_PLUGIN_AUTOLOAD": "1"}
        for i in range(n):
            cmd = [sys.executable, str(CHILD), "--url", self.url, "--queue", self.queue]
            cmd += ["--log", str(self.log), "--id", f"{self.name}-{i}"]
            cmd += ["--concurrency", str(concurrency)] + (["--cluster"] if self.cluster else [])
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
            self.procs.append(proc)
        for proc in self.procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # the child's "ready": an event, not a sleep
            assert line.strip() == b"ready", proc.stderr.read() if proc.stderr else line

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(5)


def read_log(path: Path) -> list[dict[str, Any]]:
    """The complete lines the workers wrote so far: a line still being written (no newline
    yet) is read at the next call."""
    if not path.exists():
        return []
    text = path.read_text()
    complete = text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in complete.splitlines() if line.strip()]


def wait_ends(path: Path, count: int, timeout: float) -> list[dict[str, Any]]:
    """The log once ``count`` handlers have logged their end (polled as the lines come)."""
    deadline = time.monotonic() + timeout
    while True:
        log = read_log(path)
        ended = sum(e["event"] == "end" for e in log)
        if ended >= count:
            return log
        assert time.monotonic() < deadline, f"only {ended} of {count} ended"
        time.sleep(0.05)


def most_at_once(log: list[dict[str, Any]], tenants: Iterable[str] | None = None) -> int:
    """The most handlers (of ``tenants``; None: all) running at the same time (an end before a
    start on a tie: the end is logged before the finish that frees the slot)."""
    wanted = None if tenants is None else set(tenants)
    marks = sorted(
        (e["t"], 0 if e["event"] == "end" else 1)
        for e in log
        if wanted is None or e["tenant"] in wanted
    )
    running = most = 0
    for _t, kind in marks:
        running += 1 if kind else -1
        most = max(most, running)
    return most
