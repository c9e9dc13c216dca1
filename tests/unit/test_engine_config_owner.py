"""The backend owns the queue config; the engine reads it (ADR 0021)."""

from __future__ import annotations

import asyncio

import pytest

from fairque_core import AsyncFairQueue, ConfigurationError, FairQueue, QueueConfig
from fairque_core.memory import AsyncInMemoryBackend, InMemoryBackend


def test_the_engine_reads_the_backends_config() -> None:
    config = QueueConfig(name="owned", lease_seconds=7.0)
    queue = FairQueue(InMemoryBackend(queue="owned", config=config))
    assert queue.config == config
    assert queue.config.lease_seconds == 7.0


def test_repeating_the_backends_config_is_fine() -> None:
    config = QueueConfig(name="same", lease_seconds=7.0)
    queue = FairQueue(InMemoryBackend(queue="same", config=config), config=config)
    assert queue.config == config


def test_a_differing_config_is_refused() -> None:
    backend = InMemoryBackend(queue="q", config=QueueConfig(name="q", lease_seconds=7.0))
    with pytest.raises(ConfigurationError, match="backend owns the queue config"):
        FairQueue(backend, config=QueueConfig(name="q", lease_seconds=9.0))


def test_a_differing_config_is_refused_by_the_async_engine_too() -> None:
    model = InMemoryBackend(queue="q", config=QueueConfig(name="q"))
    backend = AsyncInMemoryBackend(model=model)
    with pytest.raises(ConfigurationError):
        AsyncFairQueue(backend, config=QueueConfig(name="q", max_payload_bytes=10))


class _NoConfig:
    """A third-party backend without a queue config of its own (only what the engine reads)."""

    queue = "bare"


def test_config_stands_in_for_a_backend_without_one() -> None:
    config = QueueConfig(name="bare", lease_seconds=3.0)
    queue = FairQueue(_NoConfig(), config=config)  # type: ignore[arg-type]
    assert queue.config is config
    assert FairQueue(_NoConfig()).config == QueueConfig(name="bare")  # type: ignore[arg-type]


def test_memory_urls_go_through_the_entry_point() -> None:
    from fairque_core import FairQueueConfig

    data = {"redis": {"url": "memory://"}, "queue": {"name": "m"}}
    config = FairQueueConfig.from_dict(data, env={})
    with FairQueue.from_config(config) as queue:
        assert isinstance(queue.backend, InMemoryBackend)
        assert queue.name == "m"

    async def scenario() -> None:
        aqueue = await AsyncFairQueue.from_config(config)
        assert isinstance(aqueue.backend, AsyncInMemoryBackend)
        await aqueue.close()

    asyncio.run(scenario())
