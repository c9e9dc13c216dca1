"""Test doubles for the engine and worker tests: a fake clock and a recording plugin host."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from fairque_core import FailureType, Task
from fairque_core.domain.retry import RetryDecision


class RecordingHost:
    """A minimal PluginHost: JSON codec, a fixed retry delay (None: dead-letter at once),
    and a record of every task event."""

    def __init__(self, retry_delay: float | None = None) -> None:
        self.retry_delay = retry_delay
        self.extra_headers: dict[str, str] = {}
        self.events: list[tuple[str, Task]] = []
        self.infos: list[dict[str, Any]] = []
        self.executed = 0
        self._lock = threading.Lock()

    def encode(self, task: Task) -> tuple[bytes, str]:
        return json.dumps(dict(task.payload)).encode(), "application/json"

    def decode(self, content_type: str, body: bytes) -> dict[str, Any]:
        value = json.loads(body)
        if not isinstance(value, dict):
            raise ValueError("not an object")
        return value

    def push_headers(self, task: Task, *, queue: str = "") -> dict[str, str]:
        return {**task.headers, **self.extra_headers}

    def task_event(self, event: str, task: Task, queue: str, **info: Any) -> None:
        with self._lock:
            self.events.append((event, task))
            self.infos.append({"event": event, **info})

    def execute(self, task: Task, call: Callable[[], object], *, queue: str = "") -> object:
        with self._lock:
            self.executed += 1
        return call()

    def retry_decide(self, task: Task, error: BaseException, attempt: int) -> RetryDecision:
        if self.retry_delay is not None and task.retry_count < task.max_retries:
            return RetryDecision.retry(self.retry_delay)
        return RetryDecision.dead(FailureType.FAILED, repr(error))

    def configure(self, config: Any) -> None:
        return None

    def count(self, event: str) -> int:
        with self._lock:
            return sum(1 for e, _ in self.events if e == event)
