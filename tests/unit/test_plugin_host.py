"""PluginHost: defaults, precedence, typed results and error attribution."""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Mapping
from typing import Any

import pytest

from fairque_core import PluginError, Priority, Task, TaskSerializationError
from fairque_core.app.plugins.host import PluginHost
from fairque_core.domain.enums import FailureType
from fairque_core.domain.retry import RetryDecision
from fairque_core.ports.hooks import hookimpl


def make_task(**payload: Any) -> Task:
    return Task.create("tenant-a", Priority.NORMAL, payload or {"n": 1}, task_id="t-1")


def host(*plugins: object, **kwargs: Any) -> PluginHost:
    return PluginHost(plugins, load_entrypoints=False, **kwargs)


def test_defaults_are_registered_in_order() -> None:
    assert host().plugin_names() == [
        "fairque.defaults.json",
        "fairque.defaults.retry",
        "fairque.defaults.executor",
    ]
    assert host(defaults=False).plugin_names() == []


def test_default_json_round_trip() -> None:
    h = host()
    task = make_task(a=[1, 2.5, "x"], b={"c": None, "d": True})
    body, content_type = h.encode(task)
    assert content_type == "application/json"
    assert h.decode(content_type, body) == dict(task.payload)


@pytest.mark.parametrize(
    "payload",
    [{"x": float("nan")}, {"x": float("inf")}, {"x": {1: "int key"}}, {"x": object()}],
)
def test_default_json_is_strict(payload: dict[str, Any]) -> None:
    task = Task(task_id="t-1", tenant="u", payload=payload)
    with pytest.raises(TaskSerializationError):
        host().encode(task)


@pytest.mark.parametrize("body", [b"\xff\xfe", b"[1, 2]", b"{", b'{"x": NaN}'])
def test_default_json_rejects_bad_bytes(body: bytes) -> None:
    with pytest.raises(TaskSerializationError):
        host().decode("application/json", body)


def test_unknown_content_type_and_no_codec() -> None:
    with pytest.raises(TaskSerializationError, match="no codec"):
        host().decode("application/x-unknown", b"{}")
    with pytest.raises(TaskSerializationError, match="no codec"):
        host(defaults=False).encode(make_task())


class Upper:
    fairque_plugin_name = "upper"

    @hookimpl
    def fairque_payload_encode(self, task: Task) -> tuple[bytes, str]:
        return repr(dict(task.payload)).upper().encode(), "text/upper"


class Lower:
    fairque_plugin_name = "lower"

    @hookimpl
    def fairque_payload_encode(self, task: Task) -> tuple[bytes, str]:
        return b"lower", "text/lower"


def test_first_listed_plugin_wins_and_register_takes_precedence() -> None:
    h = host(Upper(), Lower())
    assert h.encode(make_task())[1] == "text/upper"
    assert host(Lower(), Upper()).encode(make_task())[1] == "text/lower"
    h.register(Lower(), name="late")
    assert h.encode(make_task())[1] == "text/lower"


def test_same_class_twice_gets_unique_names() -> None:
    h = host(Upper(), Upper())
    assert "upper" in h.plugin_names()
    assert "upper#2" in h.plugin_names()


class Broken:
    fairque_plugin_name = "broken"

    @hookimpl
    def fairque_payload_encode(self, task: Task) -> tuple[bytes, str]:
        raise RuntimeError("boom")

    @hookimpl
    def fairque_retry_decide(self) -> str:
        return "not a decision"


def test_raising_firstresult_plugin_is_named() -> None:
    with pytest.raises(PluginError) as info:
        host(Broken()).encode(make_task())
    assert info.value.plugin == "broken"
    assert info.value.hook == "fairque_payload_encode"
    assert isinstance(info.value.error, RuntimeError)


def test_bad_return_value_is_named() -> None:
    with pytest.raises(PluginError) as info:
        host(Broken()).retry_decide(make_task(), ValueError("x"), 1)
    assert info.value.plugin == "broken"


class Events:
    fairque_plugin_name = "events"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, Any]]] = []

    @hookimpl
    def fairque_task_event(self, event: str, queue: str, info: Mapping[str, Any]) -> None:
        self.seen.append((event, queue, dict(info)))


class RaisingEvents:
    fairque_plugin_name = "raising-events"

    @hookimpl
    def fairque_task_event(self, event: str) -> None:
        raise ValueError(f"cannot record {event}")


def test_broadcast_failure_is_logged_and_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events = Events()
    h = host(RaisingEvents(), events)  # the raising one is asked first
    with caplog.at_level(logging.ERROR, logger="fairque.plugins"):
        h.task_event("finished", make_task(), "q", run_seconds=0.5)
    assert events.seen == [("finished", "q", {"run_seconds": 0.5})]
    assert "raising-events" in caplog.text


def test_broadcast_failure_raises_when_strict() -> None:
    with pytest.raises(PluginError) as info:
        host(RaisingEvents(), strict=True).task_event("pushed", make_task(), "q")
    assert info.value.plugin == "raising-events"


class Headers:
    @hookimpl
    def fairque_push_headers(self, headers: dict[str, str], queue: str) -> None:
        headers["x-queue"] = queue


class BadHeaders:
    @hookimpl
    def fairque_push_headers(self, headers: dict[str, Any]) -> None:
        headers["x-bad"] = 1
        raise RuntimeError("half done")


def test_push_headers_merge_and_isolate_failures() -> None:
    task = Task.create("u", headers={"keep": "me"}, task_id="t-2")
    h = host(BadHeaders(), Headers())
    assert h.push_headers(task, queue="orders") == {"keep": "me", "x-queue": "orders"}
    assert task.headers == {"keep": "me"}


class Timing:
    fairque_plugin_name = "timing"

    def __init__(self) -> None:
        self.calls: list[str] = []

    @hookimpl(wrapper=True)
    def fairque_task_execute(self, task: Task) -> Generator[None, object, object]:
        self.calls.append("before")
        try:
            return (yield)
        finally:
            self.calls.append("after")


def test_execute_runs_call_inside_wrappers() -> None:
    timing = Timing()
    assert host(timing).execute(make_task(), lambda: 42) == 42
    assert timing.calls == ["before", "after"]


def test_user_exception_propagates_unchanged() -> None:
    error = KeyError("user bug")

    def call() -> object:
        raise error

    with pytest.raises(KeyError) as info:
        host(Timing()).execute(make_task(), call)
    assert info.value is error


class BrokenWrapper:
    fairque_plugin_name = "broken-wrapper"

    @hookimpl(wrapper=True)
    def fairque_task_execute(self) -> Generator[None, object, object]:
        result = yield
        raise RuntimeError(f"wrapper bug after {result!r}")


def test_wrapper_failure_is_plugin_error() -> None:
    with pytest.raises(PluginError) as info:
        host(BrokenWrapper()).execute(make_task(), lambda: 1)
    assert info.value.plugin == "broken-wrapper"


def test_execute_without_executor() -> None:
    assert host(defaults=False).execute(make_task(), lambda: "ran") == "ran"
    with pytest.raises(PluginError, match="no plugin ran the task"):
        host(Timing(), defaults=False).execute(make_task(), lambda: "ran")


def test_default_retry_backoff_then_dead() -> None:
    h = host()
    task = Task.create("u", task_id="t-3", max_retries=2)
    assert h.retry_decide(task, ValueError("x"), 1).retry_delay == 1.0
    assert h.retry_decide(task, ValueError("x"), 2).retry_delay == 2.0
    dead = h.retry_decide(task, ValueError("x"), 3)
    assert dead.retry_delay is None
    assert dead.failure_type is FailureType.FAILED


def test_retry_follows_queue_config_and_plugins_decide_first() -> None:
    from fairque_core.settings.config import QueueConfig

    h = host()
    h.configure(QueueConfig(retry_base_seconds=5.0, retry_cap_seconds=600.0))
    assert h.retry_decide(make_task(), ValueError("x"), 1).retry_delay == 5.0

    class Poison:
        @hookimpl
        def fairque_retry_decide(self, error: BaseException) -> RetryDecision | None:
            if isinstance(error, KeyError):
                return RetryDecision.dead(FailureType.POISONED, "key")
            return None

    h.register(Poison())
    assert h.retry_decide(make_task(), KeyError(), 1).failure_type is FailureType.POISONED
    assert h.retry_decide(make_task(), ValueError(), 1).retry_delay == 5.0


def test_configure_is_historic() -> None:
    got: list[object] = []

    class Late:
        @hookimpl
        def fairque_configure(self, config: object) -> None:
            got.append(config)

    h = host()
    h.configure("the-config")
    h.register(Late())
    assert got == ["the-config"]


class Misspelt:
    fairque_plugin_name = "misspelt"

    @hookimpl
    def fairque_task_evnet(self, event: str) -> None:
        pass


class WrongArgs:
    fairque_plugin_name = "wrong-args"

    @hookimpl
    def fairque_task_event(self, evnt: str) -> None:
        pass


def test_misspelt_hook_and_bad_arguments_are_named() -> None:
    with pytest.raises(PluginError, match="fairque_task_evnet") as info:
        host(Misspelt())
    assert info.value.plugin == "misspelt"
    with pytest.raises(PluginError, match="evnt") as info2:
        host(WrongArgs())
    assert info2.value.plugin == "wrong-args"


def test_autoload_env_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    original: Callable[..., None] = PluginHost._load_entrypoints

    def spy(self: PluginHost) -> None:
        calls.append("fairque")
        original(self)

    monkeypatch.setattr(PluginHost, "_load_entrypoints", spy)
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")
    PluginHost()
    assert calls == []
    monkeypatch.delenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD")
    PluginHost()
    assert calls == ["fairque"]
