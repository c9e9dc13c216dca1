"""Shared helpers of the contract suite: a fake clock, deterministic tokens, message builders."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from fairque_core import Message, Priority, QueueBackend
from fairque_testing.queues import FakeClock

__all__ = [
    "BAD_IDS",
    "CountingTokens",
    "FakeClock",
    "claim_ids",
    "claim_tenants",
    "msg",
    "new_queue_name",
    "snapshot",
]

# Ids that break the grammar (braces, whitespace, control characters, empty, too long, non-ASCII).
BAD_IDS = (
    "a{b",
    "a}b",
    "{tag}",
    "a b",
    " lead",
    "a\nb",
    "a\tb",
    "a\x00b",
    "",
    "x" * 200,
    "tenant-é",
    "ｔｅｎａｎｔ",  # full-width confusables
    "a*b",
    "a?b",
    "a[b]",
)


class CountingTokens:
    """A deterministic lease-token source: ``<prefix>-000001``, ``<prefix>-000002``, ..."""

    def __init__(self, prefix: str = "tok", start: int = 0) -> None:
        self.prefix = prefix
        self.n = start

    def __call__(self) -> str:
        self.n += 1
        return f"{self.prefix}-{self.n:06d}"


def new_queue_name() -> str:
    """A unique, valid queue name (letters and digits only)."""
    return "t" + uuid.uuid4().hex[:20]


def msg(
    task_id: str,
    tenant: str = "alice",
    priority: Priority | int = Priority.NORMAL,
    *,
    delay: float = 0.0,
    body: bytes = b'{"n": 1}',
    depends_on: Sequence[str] = (),
    max_retries: int = 3,
    headers: dict[str, str] | None = None,
    name: str = "",
    expires_ms: int = 0,
    limit_key: str = "",
) -> Message:
    return Message(
        task_id=task_id,
        tenant=tenant,
        priority=Priority(priority),
        body=body,
        max_retries=max_retries,
        created_at=1_700_000_000.5,
        delay=delay,
        depends_on=tuple(depends_on),
        headers=dict(headers or {}),
        name=name,
        expires_ms=expires_ms,
        limit_key=limit_key,
    )


def claim_tenants(backend: QueueBackend, n: int, **kwargs: Any) -> list[str]:
    """Claim ``n`` times (one task each) and return the tenant of each claimed task."""
    out: list[str] = []
    for _ in range(n):
        got = backend.claim(**kwargs)
        assert len(got) <= 1
        if not got:
            break
        out.append(got[0].message.tenant)
    return out


def claim_ids(backend: QueueBackend, n: int, **kwargs: Any) -> list[str]:
    """Claim ``n`` times (one task each) and return the claimed task ids."""
    out: list[str] = []
    for _ in range(n):
        got = backend.claim(**kwargs)
        if not got:
            break
        out.extend(c.message.task_id for c in got)
    return out


def snapshot(
    backend: QueueBackend, task_ids: Iterable[str] = (), tenants: Iterable[str] = ()
) -> dict[str, Any]:
    """Everything observable about some tasks and tenants, to compare before and after."""
    ids = list(task_ids)
    tenants = list(tenants)
    return {
        "stats": backend.stats(),
        "tenant_stats": {u: backend.tenant_stats(u) for u in tenants},
        "sizes": backend.queue_sizes(tenants),
        "states": {t: backend.get_state(t) for t in ids},
        "messages": {t: backend.get_message(t) for t in ids},
        "results": {t: backend.get_result(t) for t in ids},
        "dlq": backend.list_dlq(limit=1000),
    }
