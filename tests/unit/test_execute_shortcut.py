"""The accelerator ``plugin_shortcuts``: ShortcutHost.execute with only the built-in executor
calls the handler directly, without pluggy's hook call (issue 17, ADR 55); any plugin
implementing the hook brings the hook back. The reference PluginHost always calls the hook."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any

import pytest

from fairque_core import current_task_context
from fairque_core.app.accel.plugin_shortcuts import ShortcutHost as PluginHost
from fairque_core.app.plugins.host import PluginHost as ReferenceHost
from fairque_core.domain.errors import PluginError
from fairque_core.domain.models import Task
from fairque_core.ports.hooks import hookimpl


class _Spy:
    """Stands in for pluggy's caller of the execute hook, counting its calls."""

    def __init__(self, caller: Any) -> None:
        self.caller = caller
        self.calls = 0

    def __call__(self, **kwargs: Any) -> object:
        self.calls += 1
        return self.caller(**kwargs)

    def get_hookimpls(self) -> Any:
        return self.caller.get_hookimpls()


def _spied(host: ReferenceHost, monkeypatch: pytest.MonkeyPatch) -> _Spy:
    spy = _Spy(host._pm.hook.fairque_task_execute)
    monkeypatch.setattr(host._pm.hook, "fairque_task_execute", spy)
    return spy


class Doubling:
    """A plain executor plugin: it wins over the default (newer registration first)."""

    fairque_plugin_name = "doubling"

    @hookimpl
    def fairque_task_execute(self, call: Callable[[], object]) -> object:
        result = call()
        assert isinstance(result, int)
        return 2 * result


class Around:
    fairque_plugin_name = "around"

    def __init__(self) -> None:
        self.calls: list[str] = []

    @hookimpl(wrapper=True)
    def fairque_task_execute(self, task: Task) -> Generator[None, object, object]:
        self.calls.append(task.task_id)
        return (yield)


def test_default_executor_alone_calls_the_handler_directly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host = PluginHost(load_entrypoints=False)
    spy = _spied(host, monkeypatch)
    task = Task.create("u", task_id="t-1")

    def handler() -> object:
        return current_task_context().task.task_id

    assert host.execute(task, handler) == "t-1"  # the task's context is current
    assert host.execute(task, lambda: None) is None
    error = KeyError("user bug")

    def failing() -> object:
        raise error

    with pytest.raises(KeyError) as info:
        host.execute(task, failing)
    assert info.value is error  # unchanged, not a PluginError

    def interrupted() -> object:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        host.execute(task, interrupted)
    assert spy.calls == 0


def test_an_async_handler_still_runs_with_its_context(monkeypatch: pytest.MonkeyPatch) -> None:
    host = PluginHost(load_entrypoints=False)
    spy = _spied(host, monkeypatch)
    task = Task.create("u", task_id="t-2")

    async def handler() -> object:
        await asyncio.sleep(0)
        return current_task_context().task.task_id

    made = host.execute(task, handler)
    assert asyncio.iscoroutine(made)
    assert asyncio.run(made) == "t-2"
    assert spy.calls == 0


def test_a_registered_executor_brings_the_hook_back(monkeypatch: pytest.MonkeyPatch) -> None:
    host = PluginHost(load_entrypoints=False)
    task = Task.create("u", task_id="t-3")
    assert host.execute(task, lambda: 21) == 21
    name = host.register(Doubling())
    spy = _spied(host, monkeypatch)
    assert host.execute(task, lambda: 21) == 42
    assert spy.calls == 1
    monkeypatch.undo()  # pluggy's own caller back, for the unregister
    host.unregister(name)
    spy = _spied(host, monkeypatch)
    assert host.execute(task, lambda: 21) == 21
    assert spy.calls == 0  # the default alone again: direct


def test_a_wrapper_runs_and_its_failure_is_still_a_plugin_error() -> None:
    around = Around()
    host = PluginHost([around], load_entrypoints=False)
    task = Task.create("u", task_id="t-4")
    assert host.execute(task, lambda: "ran") == "ran"
    assert around.calls == ["t-4"]

    class Broken:
        fairque_plugin_name = "broken"

        @hookimpl(wrapper=True)
        def fairque_task_execute(self) -> Generator[None, object, object]:
            yield
            raise RuntimeError("wrapper bug")

    host.register(Broken())
    with pytest.raises(PluginError) as info:
        host.execute(task, lambda: "ran")
    assert info.value.plugin == "broken"


def test_a_subclass_of_the_default_executor_goes_through_the_hook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fairque_core.app.plugins.builtin import DefaultExecutor

    class Counting(DefaultExecutor):
        fairque_plugin_name = "counting"
        runs = 0

        @hookimpl(trylast=True)
        def fairque_task_execute(self, call: Callable[[], object]) -> object:
            Counting.runs += 1
            return call()

    host = PluginHost([Counting()], defaults=False, load_entrypoints=False)
    spy = _spied(host, monkeypatch)
    assert host.execute(Task.create("u"), lambda: 5) == 5
    assert spy.calls == 1
    assert Counting.runs == 1


def test_the_reference_host_always_calls_the_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    host = ReferenceHost(load_entrypoints=False)
    spy = _spied(host, monkeypatch)
    task = Task.create("u", task_id="t-5")
    assert host.execute(task, lambda: current_task_context().task.task_id) == "t-5"
    assert spy.calls == 1
