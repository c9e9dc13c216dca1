"""bench/bench_tenant_floor.py: its floor layouts drain every task, fairly, on a real Valkey.

The bench's figures are only worth something if its least claim and finish do the work they
stand for: every task claimed once and finished, each claim spread over the tenants of the
active set's window in pass order (or, stamped, in tag order). This drains 60 tasks over 6
tenants through each layout in claims of 4 and checks it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import redis

from fairque_redis.servers.embedded import EmbeddedValkey

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("layout", ["keys", "table", "stamped"])
def test_a_floor_layout_drains_every_task_round_robin(
    layout: str, load_bench: Callable[[str], ModuleType]
) -> None:
    tool = load_bench("bench_tenant_floor")
    with EmbeddedValkey() as server:
        client = redis.Redis.from_url(server.url)
        client.function_load(tool.TENANT_FLOOR_LIBRARY, replace=True)
        tool.fill(client, layout, 60, 6)
        loop = tool.Loop(client, layout, 4)
        seen: list[bytes] = []
        while held := loop.claim():
            # a claim of 4 over 6 equally served tenants: 4 different tenants
            owners = Counter(int(tid[1:]) % 6 for tid in held)
            assert len(owners) == len(held)
            loop.finish(held)  # asserts every task of the claim finished
            seen += held
        assert sorted(seen) == sorted(f"t{i}".encode() for i in range(60))
        assert client.zcard("{g}:leases") == 0
        assert client.zcard("{g}:active") == 0
        client.close()
