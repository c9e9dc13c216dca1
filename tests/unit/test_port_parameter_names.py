"""ADR 23: the backend port names a tenant parameter ``tenant`` (several: ``tenants``); every
backend fairque ships takes the port's parameter names, and the engines pass tenant ids
positionally, so a third-party backend with parameter names of its own works."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from fairque_core import AsyncFairQueue, AsyncInMemoryBackend, FairQueue, InMemoryBackend, Task
from fairque_core.domain.models import QueueSizes
from fairque_core.domain.tenant_figures import TenantFairness
from fairque_core.ports import AsyncQueueBackend, QueueBackend
from fairque_core.settings.config import QueueConfig
from fairque_redis import AsyncRedisBackend, RedisBackend
from fairque_redis.partitioned.backend import PartitionedBackend
from fairque_redis.partitioned.backend_async import AsyncPartitionedBackend

# The port methods that take tenant ids, and the names ADR 23 gives them.
TENANT_PARAMETERS = {
    "queue_sizes": "tenants",
    "tenant_stats": "tenant",
    "set_tenant_weight": "tenant",
    "purge_tenant": "tenant",
    "tenant_weights": "tenants",
    "tenant_fairness": "tenants",
    "xcom_get": "tenant",
    "limit_status": "tenant",
    "pause": "tenant",
    "resume": "tenant",
    "is_paused": "tenant",
}


def _parameters(method: Callable[..., Any]) -> list[tuple[str, Any]]:
    """(name, kind) of each parameter after ``self``."""
    params = list(inspect.signature(method).parameters.values())[1:]
    return [(p.name, p.kind) for p in params]


def _port_methods(port: type) -> list[str]:
    return sorted(n for n, v in vars(port).items() if callable(v) and not n.startswith("_"))


def test_the_port_names_tenant_parameters_tenant_or_tenants() -> None:
    for port in (QueueBackend, AsyncQueueBackend):
        for name, wanted in TENANT_PARAMETERS.items():
            first = _parameters(getattr(port, name))[0][0]
            assert first == wanted, (port.__name__, name, first)
        for name in _port_methods(port):
            names = [p for p, _ in _parameters(getattr(port, name))]
            assert not [p for p in names if "user" in p], (port.__name__, name)


@pytest.mark.parametrize(
    ("port", "backend"),
    [
        (QueueBackend, InMemoryBackend),
        (QueueBackend, RedisBackend),
        (QueueBackend, PartitionedBackend),
        (AsyncQueueBackend, AsyncInMemoryBackend),
        (AsyncQueueBackend, AsyncRedisBackend),
        (AsyncQueueBackend, AsyncPartitionedBackend),
    ],
    ids=lambda c: c.__name__,
)
def test_shipped_backends_take_the_port_parameter_names(port: type, backend: type) -> None:
    differ = {
        name: (_parameters(getattr(port, name)), _parameters(getattr(backend, name)))
        for name in _port_methods(port)
        if _parameters(getattr(port, name)) != _parameters(getattr(backend, name))
    }
    assert differ == {}


class _OwnNames(InMemoryBackend):
    """A backend whose parameters have names of its own (``account``, ``accounts``); a keyword
    call with the port's names would be a TypeError here."""

    def __init__(self, config: QueueConfig) -> None:
        super().__init__(config=config)
        self.called: set[str] = set()

    def queue_sizes(self, accounts: Sequence[str]) -> dict[str, QueueSizes]:
        self.called.add("queue_sizes")
        return super().queue_sizes(accounts)

    def tenant_stats(self, account: str) -> dict[str, int]:
        self.called.add("tenant_stats")
        return super().tenant_stats(account)

    def set_tenant_weight(self, account: str, weight: float, *, tier: int = 0) -> None:
        self.called.add("set_tenant_weight")
        super().set_tenant_weight(account, weight, tier=tier)

    def purge_tenant(self, account: str) -> int:
        self.called.add("purge_tenant")
        return super().purge_tenant(account)

    def tenant_weights(self, accounts: Sequence[str]) -> dict[str, tuple[float, int]]:
        self.called.add("tenant_weights")
        return super().tenant_weights(accounts)

    def tenant_fairness(
        self, accounts: Sequence[str] | None = None, *, limit: int = 100, offset: int = 0
    ) -> list[TenantFairness]:
        self.called.add("tenant_fairness")
        return super().tenant_fairness(accounts, limit=limit, offset=offset)


class _AsyncOwnNames(AsyncInMemoryBackend):
    """The same, awaitable, over an :class:`_OwnNames` model."""

    def __init__(self, model: _OwnNames) -> None:
        super().__init__(model=model)
        self.inner = model

    async def queue_sizes(self, accounts: Sequence[str]) -> dict[str, QueueSizes]:
        return self.inner.queue_sizes(accounts)

    async def tenant_stats(self, account: str) -> dict[str, int]:
        return self.inner.tenant_stats(account)

    async def set_tenant_weight(self, account: str, weight: float, *, tier: int = 0) -> None:
        self.inner.set_tenant_weight(account, weight, tier=tier)

    async def purge_tenant(self, account: str) -> int:
        return self.inner.purge_tenant(account)

    async def tenant_weights(self, accounts: Sequence[str]) -> dict[str, tuple[float, int]]:
        return self.inner.tenant_weights(accounts)

    async def tenant_fairness(
        self, accounts: Sequence[str] | None = None, *, limit: int = 100, offset: int = 0
    ) -> list[TenantFairness]:
        return self.inner.tenant_fairness(accounts, limit=limit, offset=offset)


ALL_SIX = {
    "queue_sizes",
    "tenant_stats",
    "set_tenant_weight",
    "purge_tenant",
    "tenant_weights",
    "tenant_fairness",
}


def _config() -> QueueConfig:
    return QueueConfig(name="default", tenant_weights={"b": 3.0})


def _tasks() -> list[Task]:
    return [Task.create("a", payload={"n": n}, task_id=f"a{n}") for n in range(3)]


def test_the_sync_engine_serves_a_backend_with_its_own_parameter_names() -> None:
    backend = _OwnNames(_config())
    queue = FairQueue(backend)
    queue.apply_tenant_config()  # config weights go through set_tenant_weight
    queue.push_batch(_tasks())
    queue.set_tenant_weight("a", 2.0, tier=1)
    assert queue.get_queue_sizes("a")["total"] == 3
    assert queue.get_queue_sizes_batch(["a", "b"])["b"]["total"] == 0
    assert queue.get_tenant_stats("a")["pushed"] == 3
    assert queue.get_tenant_weights(["a", "b"]) == {"a": (2.0, 1), "b": (3.0, 0)}
    assert [f.tenant for f in queue.get_tenant_fairness(["a"])] == ["a"]
    assert queue.purge_tenant("a") == 3
    assert backend.called == ALL_SIX


def test_the_async_engine_serves_a_backend_with_its_own_parameter_names() -> None:
    model = _OwnNames(_config())

    async def scenario() -> None:
        queue = AsyncFairQueue(_AsyncOwnNames(model))
        await queue.apply_tenant_config()
        await queue.push_batch(_tasks())
        await queue.set_tenant_weight("a", 2.0, tier=1)
        assert (await queue.get_queue_sizes("a"))["total"] == 3
        assert (await queue.get_queue_sizes_batch(["a", "b"]))["b"]["total"] == 0
        assert (await queue.get_tenant_stats("a"))["pushed"] == 3
        assert await queue.get_tenant_weights(["a", "b"]) == {"a": (2.0, 1), "b": (3.0, 0)}
        assert [f.tenant for f in await queue.get_tenant_fairness(["a"])] == ["a"]
        assert await queue.purge_tenant("a") == 3

    asyncio.run(scenario())
    assert model.called == ALL_SIX


def test_shipped_backends_accept_the_new_keywords() -> None:
    backend = InMemoryBackend()
    backend.set_tenant_weight(tenant="a", weight=2.0, tier=1)
    assert backend.tenant_weights(tenants=["a"]) == {"a": (2.0, 1)}
    assert backend.queue_sizes(tenants=["a"])["a"].total == 0
    assert backend.tenant_stats(tenant="a")["pushed"] == 0
    assert [f.tenant for f in backend.tenant_fairness(tenants=["a"])] == ["a"]
    assert backend.purge_tenant(tenant="a") == 0
