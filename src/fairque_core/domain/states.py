"""The task life cycle as data: which event moves a task from which state to which.

The table :data:`TRANSITIONS` is the single source of truth (as in h11's state machine):
backends and the reference model change a task's state only along its edges, the docs
diagram in ``docs/task-states.md`` is generated from it, and a unit test fails when the two
disagree. Regenerate the doc with ``python -m fairque_core.domain.states --write``.

A task that does not exist yet has no state; the push events in :data:`INITIAL_TRANSITIONS`
say where a new task enters. ``next_state(None, TaskEvent.PUSH_READY)`` is ``QUEUED``.

Two things are deliberately not states: a task whose result TTL ran out simply disappears
(reads return ``None``), and a purged DLQ entry is deleted. A push whose dependency has
already failed is recorded as ``PUSH_WAITING`` then ``DEPENDENCY_FAILED`` in one atomic step.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path
from types import MappingProxyType

from fairque_core.domain.enums import TaskState
from fairque_core.domain.errors import InvalidTransition

__all__ = [
    "DOC_BEGIN_MARKER",
    "DOC_END_MARKER",
    "INITIAL_TRANSITIONS",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "TaskEvent",
    "allowed_events",
    "main",
    "mermaid_diagram",
    "next_state",
    "render_doc",
]


class TaskEvent(str, Enum):
    """Something that happens to a task and may change its state."""

    # entry: a new task is stored
    PUSH_READY = "push_ready"  # no delay, no unfinished dependency
    PUSH_DELAYED = "push_delayed"  # execute_after in the future
    PUSH_WAITING = "push_waiting"  # depends on tasks that have not finished yet
    # refused when the intake was ingested (ADR 47): stored straight into the DLQ, as REJECTED
    INGEST_REJECTED = "ingest_rejected"
    # waiting ends
    DUE = "due"  # the delay or retry backoff ran out; moved to the tenant's queue
    DEPENDENCIES_MET = "dependencies_met"  # last dependency finished, no delay left
    DEPENDENCIES_MET_DELAYED = "dependencies_met_delayed"  # ... but its delay is still running
    DEPENDENCY_FAILED = "dependency_failed"  # a dependency failed or was canceled
    # not started before its expires_at (ADR 77): a claim found it ready or due, to the DLQ
    START_EXPIRED = "start_expired"
    # the lease
    CLAIM = "claim"  # a worker leased it
    FINISH = "finish"  # the handler succeeded
    FAIL_RETRY = "fail_retry"  # the handler failed, retries left: back off
    FAIL_DEAD = "fail_dead"  # the handler failed for good: to the DLQ (failed/poisoned)
    RELEASE = "release"  # the worker gave it back unstarted
    LEASE_EXPIRED = "lease_expired"  # the reaper found the lease expired: back to the queue
    LEASE_EXPIRED_DEAD = "lease_expired_dead"  # ... too many times: to the DLQ as expired
    # operators
    CANCEL = "cancel"
    DLQ_REQUEUE = "dlq_requeue"  # an operator sent a DLQ entry back to the queue

    def __str__(self) -> str:
        return self.value


_S = TaskState
_E = TaskEvent


def _freeze(
    table: Mapping[TaskState, Mapping[TaskEvent, TaskState]],
) -> Mapping[TaskState, Mapping[TaskEvent, TaskState]]:
    return MappingProxyType({state: MappingProxyType(dict(row)) for state, row in table.items()})


INITIAL_TRANSITIONS: Mapping[TaskEvent, TaskState] = MappingProxyType(
    {
        _E.PUSH_READY: _S.QUEUED,
        _E.PUSH_DELAYED: _S.SCHEDULED,
        _E.PUSH_WAITING: _S.DEFERRED,
        _E.INGEST_REJECTED: _S.FAILED,
    }
)
"""Where a new task enters, by push event (the task had no state before; one pushed through
the intake has none until it is ingested, ADR 47)."""

TRANSITIONS: Mapping[TaskState, Mapping[TaskEvent, TaskState]] = _freeze(
    {
        _S.SCHEDULED: {
            _E.DUE: _S.QUEUED,
            _E.START_EXPIRED: _S.FAILED,
            _E.CANCEL: _S.CANCELED,
        },
        _S.DEFERRED: {
            _E.DEPENDENCIES_MET: _S.QUEUED,
            _E.DEPENDENCIES_MET_DELAYED: _S.SCHEDULED,
            _E.DEPENDENCY_FAILED: _S.CANCELED,
            _E.CANCEL: _S.CANCELED,
        },
        _S.QUEUED: {
            _E.CLAIM: _S.STARTED,
            _E.START_EXPIRED: _S.FAILED,
            _E.CANCEL: _S.CANCELED,
        },
        _S.STARTED: {
            _E.FINISH: _S.FINISHED,
            _E.FAIL_RETRY: _S.SCHEDULED,
            _E.FAIL_DEAD: _S.FAILED,
            _E.RELEASE: _S.QUEUED,
            _E.LEASE_EXPIRED: _S.QUEUED,
            _E.LEASE_EXPIRED_DEAD: _S.FAILED,
            _E.CANCEL: _S.CANCELED,
        },
        _S.FAILED: {
            _E.DLQ_REQUEUE: _S.QUEUED,
        },
        _S.FINISHED: {},
        _S.CANCELED: {},
    }
)
"""Every allowed ``state -> event -> next state``; anything not listed is an InvalidTransition."""

TERMINAL_STATES: frozenset[TaskState] = frozenset(
    state for state, row in TRANSITIONS.items() if not row
)
"""States no event leaves (FINISHED, CANCELED). FAILED is not terminal: the DLQ can requeue."""


def next_state(state: TaskState | None, event: TaskEvent) -> TaskState:
    """The state after ``event`` in ``state`` (``None``: the task does not exist yet).

    Raises :class:`~fairque_core.domain.errors.InvalidTransition` when the table has no such edge.
    """
    row = INITIAL_TRANSITIONS if state is None else TRANSITIONS.get(state, {})
    try:
        return row[event]
    except KeyError:
        raise InvalidTransition(state, event) from None


def allowed_events(state: TaskState | None) -> frozenset[TaskEvent]:
    """The events allowed in ``state`` (``None``: the push events)."""
    row = INITIAL_TRANSITIONS if state is None else TRANSITIONS.get(state, {})
    return frozenset(row)


# ---------------------------------------------------------------------- docs generation

DOC_BEGIN_MARKER = (
    "<!-- BEGIN GENERATED: task-state-diagram (python -m fairque_core.domain.states) -->"
)
DOC_END_MARKER = "<!-- END GENERATED: task-state-diagram -->"
_DEFAULT_DOC = Path("docs") / "task-states.md"


def mermaid_diagram() -> str:
    """A Mermaid ``stateDiagram-v2`` of the table, edges in table order, one per line."""
    lines = ["stateDiagram-v2"]
    lines.extend(
        f"    [*] --> {target.name}: {event.value}" for event, target in INITIAL_TRANSITIONS.items()
    )
    for state, row in TRANSITIONS.items():
        lines.extend(
            f"    {state.name} --> {target.name}: {event.value}" for event, target in row.items()
        )
    lines.extend(f"    {state.name} --> [*]" for state in TRANSITIONS if state in TERMINAL_STATES)
    return "\n".join(lines) + "\n"


def _generated_block() -> str:
    return f"{DOC_BEGIN_MARKER}\n```mermaid\n{mermaid_diagram()}```\n{DOC_END_MARKER}"


def render_doc(text: str) -> str:
    """``text`` with the generated block between the markers replaced by the current diagram.

    ``ValueError`` when the markers are missing or out of order.
    """
    begin = text.find(DOC_BEGIN_MARKER)
    end = text.find(DOC_END_MARKER)
    if begin < 0 or end < begin:
        raise ValueError("the task-state doc lacks the generated-diagram markers")
    return text[:begin] + _generated_block() + text[end + len(DOC_END_MARKER) :]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fairque_core.domain.states [--write|--check] [PATH]``; prints the diagram
    by default."""
    parser = argparse.ArgumentParser(
        prog="python -m fairque_core.domain.states",
        description="Print the task state diagram, or refresh/check it in the docs.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the doc's generated block")
    mode.add_argument("--check", action="store_true", help="exit 1 when the doc is stale")
    parser.add_argument("path", nargs="?", type=Path, default=_DEFAULT_DOC)
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        sys.stdout.write(mermaid_diagram())
        return 0
    path: Path = args.path
    current = path.read_text(encoding="utf-8")
    fresh = render_doc(current)
    if args.check:
        if fresh != current:
            sys.stderr.write(f"{path} is stale: run python -m fairque_core.domain.states --write\n")
            return 1
        return 0
    if fresh != current:
        path.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
