"""The tenants table takes lag, oldest ready age and the starvation alarm from the queue's
``get_tenant_fairness`` (one call per page)."""

from __future__ import annotations

import asyncio

from fairque_core import AsyncFairQueue, AsyncInMemoryBackend, Message, Priority
from fairque_dashboard import figures


def test_fairness_figures_fill_the_tenants_table() -> None:
    async def run() -> dict[str, dict[str, object]]:
        backend = AsyncInMemoryBackend(queue="orders")
        for tenant in ("pinned", "other"):
            await backend.push_batch(
                [
                    Message(
                        task_id=f"{tenant}{i}", tenant=tenant, priority=Priority.NORMAL, body=b"{}"
                    )
                    for i in range(5)
                ]
            )
        for _ in range(2):
            await backend.claim(assigned=["pinned"])
        queue = AsyncFairQueue(backend)
        calls = 0
        read = queue.get_tenant_fairness

        async def counted(*args: object, **kwargs: object) -> object:
            nonlocal calls
            calls += 1
            return await read(*args, **kwargs)  # type: ignore[arg-type]

        queue.get_tenant_fairness = counted  # type: ignore[method-assign]
        facts = await figures.gather_tenant_facts(queue, ["pinned", "other"])
        assert calls == 1
        return {f.tenant: dict(figures.tenant_row(f).values) for f in facts}

    rows = asyncio.run(run())
    assert rows["pinned"]["lag"] == 2.0
    assert rows["pinned"]["alarm"] == "lag"
    assert rows["other"]["lag"] == 0.0
    assert rows["other"]["alarm"] == "-"
    assert rows["other"]["oldest"] is not None
