"""The history of a chaos run and its checker (a small analogue of Jepsen's ``total-queue``).

Every process appends JSON lines to its own file (or a shared one: each line is ONE ``write`` on
an ``O_APPEND`` descriptor, so lines of several processes never interleave):

- producers: ``push:invoke`` then ``push:ok`` / ``push:fail`` (the call surely did nothing) /
  ``push:unknown`` (it may or may not have been applied), per task id and attempt;
- handlers: ``exec:start`` / ``exec:end`` (task id, attempt, pid, lease token);
- backends (``chaos_worker.py``): ``error`` with the operation and the exception's type.

:func:`check` computes, given where the tasks ended on the server (finished, in the DLQ,
canceled): ``lost`` = acknowledged pushes that never reached an end state, ``dup_exec`` = extra
executions per id, ``unexpected`` = executed ids no producer invoked, ``recovered`` = ids whose
push was ambiguous at least once and that were executed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fairque_core.domain.errors import FairQueueError, OutcomeUnknownError, RedisConnectionError

__all__ = ["History", "Verdict", "check", "push_until_acknowledged", "read_history"]


class History:
    """An append-only JSON-lines log (thread-safe; one ``write`` per line)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        self.pid = os.getpid()

    def record(self, event: str, task_id: str = "", **fields: Any) -> None:
        line = {"ev": event, "id": task_id, "pid": self.pid, "t": time.time(), **fields}
        data = (json.dumps(line, default=str) + "\n").encode()
        with self._lock:
            os.write(self._fd, data)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def read_history(*paths: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every record of the given files (missing files are empty), in time order."""
    out: list[dict[str, Any]] = []
    for path in paths:
        file = Path(path)
        if file.exists():
            out.extend(json.loads(line) for line in file.read_text().splitlines() if line)
    out.sort(key=lambda rec: rec["t"])
    return out


def push_until_acknowledged(
    push: Callable[[], object],
    task_id: str,
    history: History,
    *,
    pause: float = 0.02,
    give_up_after: float = 30.0,
) -> int:
    """Call ``push`` until it succeeds, logging every attempt; returns the number of attempts.

    Only fairque's typed connection errors are retried (push is idempotent by task id); any
    other exception is logged as ``push:fail`` with its type and raised.
    """
    deadline = time.monotonic() + give_up_after
    attempt = 0
    while True:
        attempt += 1
        history.record("push:invoke", task_id, attempt=attempt)
        try:
            push()
        except OutcomeUnknownError as exc:
            history.record("push:unknown", task_id, attempt=attempt, error=type(exc).__name__)
        except RedisConnectionError as exc:
            history.record("push:fail", task_id, attempt=attempt, error=type(exc).__name__)
        except BaseException as exc:
            typed = isinstance(exc, FairQueueError)
            history.record(
                "push:fail", task_id, attempt=attempt, error=type(exc).__name__, typed=typed
            )
            raise
        else:
            history.record("push:ok", task_id, attempt=attempt)
            return attempt
        if time.monotonic() > deadline:
            raise TimeoutError(f"push of {task_id} not acknowledged after {attempt} attempts")
        time.sleep(pause)


@dataclass
class Verdict:
    """What :func:`check` found."""

    ok_pushes: set[str]
    lost: set[str]
    dup_exec: dict[str, int]  # id -> executions beyond the first
    unexpected: set[str]
    recovered: set[str]
    executed: Counter[str] = field(default_factory=Counter)
    unknown_pushes: int = 0
    failed_pushes: int = 0

    def summary(self) -> str:
        return (
            f"ok_pushes={len(self.ok_pushes)} lost={len(self.lost)} "
            f"dup_exec={sum(self.dup_exec.values())} unexpected={len(self.unexpected)} "
            f"recovered={len(self.recovered)} unknown_pushes={self.unknown_pushes} "
            f"failed_pushes={self.failed_pushes}"
        )


def check(records: Iterable[Mapping[str, Any]], end_states: Mapping[str, str]) -> Verdict:
    """The verdict on a history, given each task's end state on the server after a drain
    (``finished``, ``failed`` = in the DLQ, ``canceled``; other or missing ids are not done)."""
    invoked: set[str] = set()
    ok: set[str] = set()
    ambiguous: set[str] = set()
    executed: Counter[str] = Counter()
    unknown = failed = 0
    for rec in records:
        event, task_id = rec["ev"], rec["id"]
        if event == "push:invoke":
            invoked.add(task_id)
        elif event == "push:ok":
            ok.add(task_id)
        elif event == "push:unknown":
            ambiguous.add(task_id)
            unknown += 1
        elif event == "push:fail":
            failed += 1
        elif event == "exec:start":
            executed[task_id] += 1
    done = {i for i, state in end_states.items() if state in ("finished", "failed", "canceled")}
    return Verdict(
        ok_pushes=ok,
        lost=ok - done,
        dup_exec={i: n - 1 for i, n in executed.items() if n > 1},
        unexpected=set(executed) - invoked,
        recovered={i for i in ambiguous if executed[i]},
        executed=executed,
        unknown_pushes=unknown,
        failed_pushes=failed,
    )
