"""The accelerator ``plugin_shortcuts`` equals the reference plugin host.

For several plugin sets (none, a codec, a tracing-like listener, a retry policy, all of them),
the same operations on a host built with the switch on (``ShortcutHost``) and off (the
reference ``PluginHost``) give the same results and errors, and the registered plugins see
the same hook calls in the same order; also across a register and an unregister.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairque_core.app import context
from fairque_core.app.accel.plugin_shortcuts import ShortcutHost, host_class
from fairque_core.app.plugins.host import PluginHost
from fairque_core.domain.enums import FailureType
from fairque_core.domain.models import Task
from fairque_core.domain.retry import RetryDecision
from fairque_core.ports.hooks import hookimpl
from fairque_core.settings.accel import Accelerators

Calls = list[tuple[str, ...]]


class Codec:
    """A codec of its own content type, for payloads that carry a "mark" key."""

    fairque_plugin_name = "codec"

    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    @hookimpl
    def fairque_payload_encode(self, task: Task) -> tuple[bytes, str] | None:
        self.calls.append(("codec.encode", task.task_id))
        if "mark" not in task.payload:
            return None
        return repr(sorted(task.payload)).encode(), "text/x-marked"

    @hookimpl
    def fairque_payload_decode(self, content_type: str, body: bytes) -> dict[str, Any] | None:
        self.calls.append(("codec.decode", content_type))
        return {"marked": body.decode()} if content_type == "text/x-marked" else None


class Tracing:
    """Adds a trace header, hears every event, wraps every execution."""

    fairque_plugin_name = "tracing"

    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    @hookimpl
    def fairque_push_headers(self, task: Task, headers: dict[str, str], queue: str) -> None:
        self.calls.append(("tracing.headers", task.task_id, queue))
        headers["traceparent"] = f"00-{task.task_id}"

    @hookimpl
    def fairque_task_event(self, event: str, task: Task, queue: str, info: Any) -> None:
        self.calls.append(("tracing.event", event, task.task_id, queue, repr(sorted(info))))

    @hookimpl(wrapper=True)
    def fairque_task_execute(self, task: Task) -> Generator[None, object, object]:
        self.calls.append(("tracing.start", task.task_id))
        try:
            return (yield)
        finally:
            self.calls.append(("tracing.end", task.task_id))


class Policy:
    """Retries a ValueError after one second; has no opinion on anything else."""

    fairque_plugin_name = "policy"

    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    @hookimpl
    def fairque_retry_decide(
        self, task: Task, error: BaseException, attempt: int
    ) -> RetryDecision | None:
        self.calls.append(("policy.decide", task.task_id, type(error).__name__, str(attempt)))
        if isinstance(error, ValueError):
            return RetryDecision.retry(1.0, "policy")
        return None


PLUGIN_SETS: dict[str, tuple[type, ...]] = {
    "none": (),
    "codec": (Codec,),
    "tracing": (Tracing,),
    "retry": (Policy,),
    "all": (Codec, Tracing, Policy),
}


def _outcome(make: Callable[[], object]) -> tuple[Any, ...]:
    """A call's result, or its error's type, words and the plugin it names."""
    try:
        return ("ok", make())
    except Exception as exc:  # the error's type and words are part of the behaviour
        return ("error", type(exc).__name__, str(exc), getattr(exc, "plugin", None))


def _decision(value: object) -> object:
    if isinstance(value, RetryDecision):
        return (value.retry_delay, value.failure_type, value.reason)
    return value


def _handler(ok: bool) -> Callable[[], object]:
    def run() -> object:
        current = context.current_task_context()
        if not ok:
            raise KeyError(current.task.task_id)
        return ("ran", current.task.task_id)

    return run


def _session(accel: Accelerators, kinds: tuple[type, ...], payloads: list[Any]) -> list[Any]:
    """Every host operation on a host built as a composition root builds it; what each
    answered and what the plugins saw, in order."""
    calls: Calls = []
    host = host_class(accel)([kind(calls) for kind in kinds], load_entrypoints=False)
    host.configure({"queue": "q"})
    seen: list[Any] = []

    def run() -> None:
        for n, payload in enumerate(payloads):
            task = Task(task_id=f"task-{n}", tenant="t", payload=payload, headers={"h": "v"})
            encoded = _outcome(lambda: host.encode(task))  # noqa: B023 - called at once
            seen.append(encoded)
            if encoded[0] == "ok":
                body, content_type = encoded[1]
                seen.append(_outcome(lambda: host.decode(content_type, body)))  # noqa: B023
            seen.append(_outcome(lambda: host.push_headers(task, queue="q")))  # noqa: B023
            seen.append(host.has_event_listeners())
            seen.append(_outcome(lambda: host.task_event("pushed", task, "q", n=1)))  # noqa: B023
            seen.append(_outcome(lambda: host.execute(task, _handler(True), queue="q")))  # noqa: B023
            seen.append(_outcome(lambda: host.execute(task, _handler(False), queue="q")))  # noqa: B023
            for error in (ValueError("v"), KeyError("k")):
                decided = _outcome(lambda: host.retry_decide(task, error, 2))  # noqa: B023
                seen.append((decided[0], _decision(decided[1])))
        for content_type, body in [
            ("application/json; charset=utf-8", b'{"a":1}'),
            ("application/json", b"[1]"),
            ("application/json", b"{bad"),
            ("text/x-marked", b"m"),
            ("unknown/x", b"?"),
        ]:
            seen.append(_outcome(lambda: host.decode(content_type, body)))  # noqa: B023

    run()
    name = host.register(Tracing(calls))  # a listener joins: the shortcuts must see it
    run()
    host.unregister(name)
    run()
    seen.append(calls)
    seen.append(host.plugin_names())
    return seen


payload_values = st.one_of(
    st.dictionaries(st.text(max_size=3), st.integers() | st.text(max_size=3), max_size=3),
    st.just({"mark": 1}),
    st.just({1: "not a str key"}),
    st.just({"x": float("nan")}),
    st.just({"s": "\ud800"}),
)


@pytest.mark.parametrize("plugin_set", list(PLUGIN_SETS))
@settings(max_examples=15, deadline=None)
@given(payloads=st.lists(payload_values, min_size=1, max_size=3))
def test_the_shortcut_host_equals_the_reference(plugin_set: str, payloads: list[Any]) -> None:
    kinds = PLUGIN_SETS[plugin_set]
    on = _session(Accelerators(), kinds, payloads)
    off = _session(Accelerators.none(), kinds, payloads)
    assert on == off


def test_the_switch_picks_the_host() -> None:
    assert host_class(Accelerators()) is ShortcutHost
    assert host_class(Accelerators.none()) is PluginHost
    assert host_class(Accelerators(off=frozenset({"plugin_shortcuts"}))) is PluginHost


def test_a_retry_policy_outcome_is_the_same() -> None:
    calls: Calls = []
    task = Task.create("t", task_id="x")
    for accel in (Accelerators(), Accelerators.none()):
        host = host_class(accel)([Policy(calls)], load_entrypoints=False)
        assert host.retry_decide(task, ValueError("v"), 1).retry_delay == 1.0
        fallback = host.retry_decide(task, KeyError("k"), 99)
        assert fallback.failure_type is FailureType.FAILED
    assert calls[:2] == calls[2:]
