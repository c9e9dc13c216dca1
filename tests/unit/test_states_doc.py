"""The task-state table, its generated diagram, and the doc that embeds it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fairque_core import InvalidTransition, TaskEvent, TaskState, next_state
from fairque_core.domain.states import (
    DOC_BEGIN_MARKER,
    DOC_END_MARKER,
    INITIAL_TRANSITIONS,
    TERMINAL_STATES,
    TRANSITIONS,
    allowed_events,
    main,
    mermaid_diagram,
    render_doc,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "task-states.md"
EDGE = re.compile(r"^\s+(\[\*\]|[A-Z]+) --> (\[\*\]|[A-Z]+)(?:: ([a-z_]+))?$")


def _doc_block(text: str) -> str:
    begin = text.index(DOC_BEGIN_MARKER) + len(DOC_BEGIN_MARKER)
    end = text.index(DOC_END_MARKER)
    return text[begin:end]


def test_doc_embeds_the_current_diagram() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert _doc_block(text) == f"\n```mermaid\n{mermaid_diagram()}```\n", (
        "docs/task-states.md is stale: run "
        "`uv run --no-sync python -m fairque_core.domain.states --write`"
    )
    assert render_doc(text) == text


def test_doc_edges_are_exactly_the_table() -> None:
    """Parse the doc's diagram back into edges and compare with the table itself."""
    parsed: set[tuple[str, str, str | None]] = set()
    for line in _doc_block(DOC.read_text(encoding="utf-8")).splitlines():
        match = EDGE.match(line)
        if match:
            parsed.add((match[1], match[2], match[3]))
    expected: set[tuple[str, str, str | None]]
    expected = {("[*]", s.name, e.value) for e, s in INITIAL_TRANSITIONS.items()}
    expected |= {
        (s.name, t.name, e.value) for s, row in TRANSITIONS.items() for e, t in row.items()
    }
    expected |= {(s.name, "[*]", None) for s in TERMINAL_STATES}
    assert parsed == expected


def test_diagram_shape() -> None:
    diagram = mermaid_diagram()
    assert diagram.startswith("stateDiagram-v2\n")
    lines = diagram.splitlines()[1:]
    assert all(EDGE.match(line) for line in lines)
    edges = sum(len(row) for row in TRANSITIONS.values())
    assert len(lines) == len(INITIAL_TRANSITIONS) + edges + len(TERMINAL_STATES)


def test_every_state_has_a_row_and_every_event_is_used() -> None:
    assert set(TRANSITIONS) == set(TaskState)
    used = set(INITIAL_TRANSITIONS)
    for row in TRANSITIONS.values():
        used |= set(row)
    assert used == set(TaskEvent)


def test_terminal_states() -> None:
    assert {TaskState.FINISHED, TaskState.CANCELED} == TERMINAL_STATES
    assert TaskState.FAILED not in TERMINAL_STATES


@pytest.mark.parametrize(
    ("state", "event", "target"),
    [
        (None, TaskEvent.PUSH_READY, TaskState.QUEUED),
        (None, TaskEvent.PUSH_DELAYED, TaskState.SCHEDULED),
        (None, TaskEvent.PUSH_WAITING, TaskState.DEFERRED),
        (TaskState.SCHEDULED, TaskEvent.DUE, TaskState.QUEUED),
        (TaskState.DEFERRED, TaskEvent.DEPENDENCIES_MET, TaskState.QUEUED),
        (TaskState.DEFERRED, TaskEvent.DEPENDENCIES_MET_DELAYED, TaskState.SCHEDULED),
        (TaskState.DEFERRED, TaskEvent.DEPENDENCY_FAILED, TaskState.CANCELED),
        (TaskState.QUEUED, TaskEvent.CLAIM, TaskState.STARTED),
        (TaskState.STARTED, TaskEvent.FINISH, TaskState.FINISHED),
        (TaskState.STARTED, TaskEvent.FAIL_RETRY, TaskState.SCHEDULED),
        (TaskState.STARTED, TaskEvent.FAIL_DEAD, TaskState.FAILED),
        (TaskState.STARTED, TaskEvent.RELEASE, TaskState.QUEUED),
        (TaskState.STARTED, TaskEvent.LEASE_EXPIRED, TaskState.QUEUED),
        (TaskState.STARTED, TaskEvent.LEASE_EXPIRED_DEAD, TaskState.FAILED),
        (TaskState.FAILED, TaskEvent.DLQ_REQUEUE, TaskState.QUEUED),
    ],
)
def test_backend_semantics(state: TaskState | None, event: TaskEvent, target: TaskState) -> None:
    assert next_state(state, event) is target


@pytest.mark.parametrize("state", list(TaskState))
def test_cancel_is_allowed_exactly_while_alive(state: TaskState) -> None:
    alive = {TaskState.SCHEDULED, TaskState.DEFERRED, TaskState.QUEUED, TaskState.STARTED}
    if state in alive:
        assert next_state(state, TaskEvent.CANCEL) is TaskState.CANCELED
        assert TaskEvent.CANCEL in allowed_events(state)
    else:
        with pytest.raises(InvalidTransition):
            next_state(state, TaskEvent.CANCEL)


def test_invalid_transition_carries_state_and_event() -> None:
    with pytest.raises(InvalidTransition) as info:
        next_state(TaskState.FINISHED, TaskEvent.CLAIM)
    assert info.value.state is TaskState.FINISHED
    assert info.value.event is TaskEvent.CLAIM
    assert str(info.value) == "event claim is not allowed in state finished"
    with pytest.raises(InvalidTransition):
        next_state(None, TaskEvent.CLAIM)


def test_tables_are_read_only() -> None:
    with pytest.raises(TypeError):
        TRANSITIONS[TaskState.FINISHED] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        TRANSITIONS[TaskState.QUEUED][TaskEvent.FINISH] = TaskState.FINISHED  # type: ignore[index]


def test_render_doc_replaces_only_the_block() -> None:
    text = f"intro\n{DOC_BEGIN_MARKER}\nold\n{DOC_END_MARKER}\noutro\n"
    fresh = render_doc(text)
    assert fresh.startswith("intro\n")
    assert fresh.endswith("\noutro\n")
    assert "old" not in fresh
    assert mermaid_diagram() in fresh
    assert render_doc(fresh) == fresh
    with pytest.raises(ValueError, match="markers"):
        render_doc("no markers here")


def test_main_write_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "states.md"
    doc.write_text(f"# x\n{DOC_BEGIN_MARKER}\nstale\n{DOC_END_MARKER}\n", encoding="utf-8")
    assert main(["--check", str(doc)]) == 1
    assert "stale" in capsys.readouterr().err
    assert main(["--write", str(doc)]) == 0
    assert main(["--check", str(doc)]) == 0
    assert mermaid_diagram() in doc.read_text(encoding="utf-8")
    assert main([]) == 0
    assert capsys.readouterr().out == mermaid_diagram()


def test_module_entry_point_checks_the_real_doc() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fairque_core.domain.states", "--check", str(DOC)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
