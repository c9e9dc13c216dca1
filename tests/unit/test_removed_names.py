"""The deprecated spellings of ADR 22 and ADR 23 were removed before the first release
(CHANGELOG.md): each old name is refused the way Python refuses an unknown name, and the
new name does the work."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import attrs
import pytest

import fairque_core
from fairque_core import (
    AsyncFairQueue,
    AsyncInMemoryBackend,
    ConfigurationError,
    FairQueue,
    FairQueueConfig,
    InMemoryBackend,
    Priority,
    Task,
    WorkerConfig,
)
from fairque_core.app.worker.handlers import TaskRegistry
from fairque_core.domain import retry as retry_module
from fairque_core.domain.models import Message


def _queue() -> FairQueue:
    queue = FairQueue(InMemoryBackend())
    queue.push(Task.create("a", payload={}, task_id="x"))
    return queue


@pytest.mark.parametrize("old", ["pop", "pop_batch", "finish_many", "heartbeat_many"])
def test_the_engines_have_no_old_method_names(old: str) -> None:
    for engine in (FairQueue, AsyncFairQueue):
        assert not hasattr(engine, old), (engine.__name__, old)
    with pytest.raises(AttributeError):
        getattr(_queue(), old)


def test_the_new_method_names_do_the_work() -> None:
    queue = _queue()
    (task,) = queue.claim_batch(5, ["a"])
    renewed = queue.heartbeat_batch([task])
    assert renewed[0] is not None
    assert queue.finish_batch([(task, {"ok": 1})]) == [True]
    assert queue.get_result("x") == {"ok": 1}
    assert queue.claim() is None


def test_the_old_keywords_of_the_engine_are_unknown() -> None:
    queue = _queue()
    old: Any = queue  # the calls below are wrong on purpose: mypy would refuse them
    with pytest.raises(TypeError, match="user_id"):
        old.get_queue_sizes(user_id="a")
    with pytest.raises(TypeError, match="user_ids"):
        old.get_queue_sizes_batch(user_ids=["a"])
    with pytest.raises(TypeError, match="user_id"):
        old.get_tenant_stats(user_id="a")
    with pytest.raises(TypeError, match="user_id"):
        old.set_tenant_weight(user_id="a", weight=2.0)
    assert queue.get_queue_sizes(tenant="a")["total"] == 1
    assert queue.get_queue_sizes_batch(tenants=["a"])["a"]["total"] == 1


def test_the_async_engine_refuses_the_old_names_too() -> None:
    async def run() -> None:
        queue = AsyncFairQueue(AsyncInMemoryBackend())
        old: Any = queue
        with pytest.raises(AttributeError):
            old.pop_batch  # noqa: B018
        with pytest.raises(TypeError, match="user_id"):
            await old.get_tenant_stats(user_id="a")
        assert (await queue.get_tenant_stats(tenant="a"))["pushed"] == 0

    asyncio.run(run())


def test_records_have_no_user_id() -> None:
    task = Task.create("acme")
    old: Any = task
    with pytest.raises(AttributeError):
        old.user_id  # noqa: B018
    with pytest.raises(TypeError, match="user_id"):
        Task(task_id="t", user_id="acme", created_at=1.0, execute_after=1.0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="user_id"):
        Task.create(user_id="acme")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="user_id"):
        attrs.evolve(task, user_id="b")
    message = Message(task_id="t", tenant="acme", priority=Priority.NORMAL, body=b"")
    old = message
    with pytest.raises(AttributeError):
        old.user_id  # noqa: B018
    with pytest.raises(TypeError, match="user_id"):
        Message(task_id="t", user_id="a", priority=Priority.NORMAL, body=b"")  # type: ignore[call-arg]


def test_a_task_function_takes_no_user_id_for_its_tenant() -> None:
    reg = TaskRegistry()

    @reg.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    call: Any = add
    with pytest.raises(TypeError, match="tenant"):
        call(user_id="acme", a=1, b=2)
    with pytest.raises(TypeError, match="tenant"):
        call.step(user_id="acme", b=2)
    # with a tenant, user_id= is one more argument of the function, which has none of that name
    with pytest.raises(fairque_core.TaskValidationError, match="user_id"):
        call("acme", a=1, b=2, user_id="other")
    assert add("acme", a=1, b=2).tenant == "acme"


def test_worker_config_has_no_assigned_users() -> None:
    with pytest.raises(TypeError, match="assigned_users"):
        WorkerConfig(assigned_users=["a"])  # type: ignore[call-arg]
    config: Any = WorkerConfig(assigned_tenants=["a"])
    with pytest.raises(AttributeError):
        config.assigned_users  # noqa: B018


def test_the_config_file_and_environment_refuse_assigned_users() -> None:
    with pytest.raises(ConfigurationError, match="assigned_users"):
        FairQueueConfig.from_dict({"worker": {"assigned_users": ["a"]}}, env={})
    with pytest.raises(ConfigurationError, match="ASSIGNED_USERS"):
        FairQueueConfig.from_dict({}, env={"FAIRQUE_WORKER__ASSIGNED_USERS": "x,y"})
    config = FairQueueConfig.from_dict({}, env={"FAIRQUE_WORKER__ASSIGNED_TENANTS": "x,y"})
    assert config.worker.assigned_tenants == ["x", "y"]


def test_retry_policy_is_only_the_plugin() -> None:
    with pytest.raises(ImportError):
        from fairque_core import RetryPolicy  # type: ignore[attr-defined]  # noqa: F401
    with pytest.raises(AttributeError):
        retry_module.RetryPolicy  # type: ignore[attr-defined]  # noqa: B018
    from fairque_plugins import RetryPolicy as Plugin

    assert Plugin.__module__ == "fairque_plugins.retry_policy"


@pytest.mark.parametrize(
    "module", ["fairque_core.app.deprecation", "fairque_core.domain.deprecation"]
)
def test_the_deprecation_helpers_are_gone(module: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(module)
