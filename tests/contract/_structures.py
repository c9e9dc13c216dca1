"""Read a queue's real server structures (through ``KeySpace``) to compare with its gauges."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def read_structures(probe: Any, *, tenants: Iterable[str]) -> dict[str, Any]:
    from fairque_redis.keys import KeySpace

    ks = KeySpace(probe.queue)
    client = probe.client
    active_keys = sorted(k for k in probe.queue_keys() if k.startswith(ks.prefix + "active:"))
    tiers = [m.decode() if isinstance(m, bytes) else str(m) for m in client.zrange(ks.tiers, 0, -1)]
    # Every non-empty active set is listed in the tiers set, and no other.
    nonempty = sorted(k for k in active_keys if client.zcard(k))
    assert nonempty == sorted(ks.active(int(float(t))) for t in tiers), (nonempty, tiers)
    return {
        "leased": client.zcard(ks.leases),
        "scheduled": client.zcard(ks.delayed),
        "dlq": client.zcard(ks.dlq),
        "active_tenants": sum(client.zcard(k) for k in active_keys),
        "critical": {u: client.llen(ks.critical(u)) for u in tenants},
        "normal": {u: client.zcard(ks.normal(u)) for u in tenants},
    }
