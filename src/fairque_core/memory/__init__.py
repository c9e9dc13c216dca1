"""The in-memory adapter: the reference model of the queue, sync and async.

``memory://`` URLs reach it through the ``fairque.backends`` entry point, as ``redis://``
URLs reach the Redis adapter: :func:`backend_from_url` is the factory registered for it.

Where to look:

* ``model.py``: :class:`InMemoryBackend`, with push, claim, cancel and the reads;
* ``leases.py``: heartbeat, finish, fail, release and the expired-lease reaper;
* ``dlq.py``: the dead-letter queue (entering it, list, requeue, purge);
* ``intake.py``: the intake (ADR 47): push_intake, and ingesting at a claim or on ``ingest``;
* ``store.py``: task records, tenants' ready work, state moves, the lock;
* ``wake.py``: the wake signal idle workers wait on;
* ``async_model.py``: :class:`AsyncInMemoryBackend`, the same model behind the async port.

The fair choice of a tenant is in :mod:`fairque_core.domain.fairness`.
"""

from __future__ import annotations

from typing import Any

import attrs

from fairque_core.memory.async_model import AsyncInMemoryBackend
from fairque_core.memory.model import InMemoryBackend
from fairque_core.settings.config import FairQueueConfig

__all__ = ["AsyncInMemoryBackend", "InMemoryBackend", "backend_from_url"]


def backend_from_url(
    url: str,
    *,
    queue: str = "default",
    config: FairQueueConfig | None = None,
    cluster: bool = False,
    asyncio: bool = False,
    **opts: Any,
) -> InMemoryBackend | AsyncInMemoryBackend:
    """A fresh in-process model for a ``memory://`` URL (async with ``asyncio=True``).

    The queue is named ``queue`` and follows ``config.queue`` (its settings, renamed to
    ``queue`` if the two names differ). ``cluster`` means nothing here and is ignored; the
    rest of ``opts`` go to :class:`InMemoryBackend` (``clock``, ``token_source``). Nothing of
    the URL beyond its scheme is read: each call makes a new, empty queue.
    """
    del url, cluster
    queue_config = None
    if config is not None:
        queue_config = config.queue
        if queue_config.name != queue:
            queue_config = attrs.evolve(queue_config, name=queue)
    model = InMemoryBackend(queue=queue, config=queue_config, **opts)
    if asyncio:
        return AsyncInMemoryBackend(model=model)
    return model
