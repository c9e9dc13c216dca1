"""Properties of the task state machine: only declared transitions, terminal means terminal,
every state reachable from a push, and no live state is a dead end."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairque_core import InvalidTransition, TaskEvent, TaskState, next_state
from fairque_core.domain.states import INITIAL_TRANSITIONS, TERMINAL_STATES, TRANSITIONS

start_states = st.sampled_from([None, *TaskState])
event_runs = st.lists(st.sampled_from(list(TaskEvent)), max_size=60)


def _declared(state: TaskState | None, event: TaskEvent) -> TaskState | None:
    row = INITIAL_TRANSITIONS if state is None else TRANSITIONS[state]
    return row.get(event)


@given(start_states, event_runs)
def test_only_declared_transitions(start: TaskState | None, events: list[TaskEvent]) -> None:
    """next_state raises InvalidTransition exactly when (state, event) is not in the table,
    and otherwise goes where the table says; a refused event leaves the state unchanged."""
    state = start
    for event in events:
        target = _declared(state, event)
        if target is None:
            with pytest.raises(InvalidTransition) as info:
                next_state(state, event)
            assert info.value.state == state
            assert info.value.event is event
        else:
            assert next_state(state, event) is target
            state = target


@given(start_states, event_runs)
def test_terminal_states_stay_terminal(start: TaskState | None, events: list[TaskEvent]) -> None:
    state = start
    reached_terminal = False
    for event in events:
        try:
            state = next_state(state, event)
        except InvalidTransition:
            continue
        if reached_terminal:
            pytest.fail(f"left a terminal state with {event}")
        reached_terminal = state in TERMINAL_STATES


@given(st.sampled_from(sorted(TERMINAL_STATES)), st.sampled_from(list(TaskEvent)))
def test_no_event_leaves_a_terminal_state(state: TaskState, event: TaskEvent) -> None:
    with pytest.raises(InvalidTransition):
        next_state(state, event)


def _reachable(starts: set[TaskState]) -> set[TaskState]:
    seen = set(starts)
    todo = deque(starts)
    while todo:
        for target in TRANSITIONS[todo.popleft()].values():
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_every_state_is_reachable_from_the_push_events() -> None:
    assert _reachable(set(INITIAL_TRANSITIONS.values())) == set(TaskState)


@pytest.mark.parametrize("state", sorted(set(TaskState) - TERMINAL_STATES))
def test_every_live_state_can_still_end(state: TaskState) -> None:
    """No live state is a trap: FINISHED and CANCELED both stay reachable from it."""
    assert _reachable({state}) >= TERMINAL_STATES


@given(start_states, event_runs)
def test_walks_visit_only_table_states(start: TaskState | None, events: list[TaskEvent]) -> None:
    state = start
    for event in events:
        try:
            state = next_state(state, event)
        except InvalidTransition:
            continue
        assert state in TRANSITIONS
