"""The tenants page shows flow control (ADR 28) from ``get_tenant_limits``: running vs cap, the
rate's tokens or next start, queued vs cap, cap hits / throttles / refusals, a capped badge,
and the paused badge from the same reading (no ``is_paused`` call per tenant)."""

from __future__ import annotations

import re

import attrs
import pytest

from fairque_core import AsyncFairQueue, Limits, LimitStatus, Task, TenantQueueFullError
from fairque_dashboard import figures

from .conftest import Env


def _cells(html: str, tenant: str) -> dict[str, str]:
    row = re.search(rf'<tr data-tenant="{tenant}">(.*?)</tr>', html, re.S)
    assert row is not None, tenant
    cells = dict(re.findall(r'data-col="([^"]+)"[^>]*>([^<]*)<', row.group(1)))
    cells["badges"] = " ".join(re.findall(r'class="badge (\w+)"', row.group(1)))
    return cells


def _seed(env: Env) -> None:
    q = env.queue
    q.set_tenant_limits("capped", max_running=1)
    q.push_batch([Task.create("capped", payload={"n": i}) for i in range(2)])
    assert q.claim(["capped"]) is not None
    q.set_tenant_limits("slow", rate=0.001)
    q.push_batch([Task.create("slow", payload={"n": i}) for i in range(2)])
    assert q.claim(["slow"]) is not None
    q.set_tenant_limits("full", max_queued=1)
    q.push(Task.create("full", payload={}))
    with pytest.raises(TenantQueueFullError):
        q.push(Task.create("full", payload={}))
    q.pause("held")
    q.push(Task.create("held", payload={}))
    q.push(Task.create("free", payload={}))


def test_limits_on_the_tenants_page(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    _seed(env)

    async def no_is_paused(self: AsyncFairQueue, tenant: str | None = None) -> bool:
        raise AssertionError("the tenants page reads paused from get_tenant_limits")

    monkeypatch.setattr(AsyncFairQueue, "is_paused", no_is_paused)
    with env.client() as client:
        page = client.get("/tenants")
        assert page.status_code == 200, page.text
        html = page.text
    capped = _cells(html, "capped")
    assert (capped["running"], capped["cap"], capped["queued"], capped["qcap"]) == (
        "1",
        "1",
        "1",
        "-",
    )
    assert (capped["cap_hits"], capped["throttles"], capped["refusals"]) == ("1", "0", "0")
    assert capped["badges"] == "capped"
    slow = _cells(html, "slow")
    assert re.fullmatch(r"throttled, next in \d+(\.\d+)? s", slow["rate"]), slow["rate"]
    assert float(slow["rate"].split()[3]) > 900
    assert (slow["cap"], slow["throttles"], slow["badges"]) == ("-", "1", "")
    full = _cells(html, "full")
    assert (full["queued"], full["qcap"], full["refusals"], full["rate"]) == ("1", "1", "1", "-")
    held = _cells(html, "held")
    assert held["badges"] == "paused"
    assert held["queued"] == "1"
    free = _cells(html, "free")
    assert (free["cap"], free["rate"], free["qcap"], free["badges"]) == ("-", "-", "-", "")
    with env.client() as client:
        by_refusals = client.get("/tenants?sort=refusals&dir=desc").text
    assert re.findall(r'data-tenant="([^"]+)"', by_refusals)[0] == "full"


def test_limits_reading_of_a_limit_status() -> None:
    status = LimitStatus(
        tenant="t",
        own=Limits(rate=2.0),
        effective=Limits(max_running=3, rate=2.0, burst=4),
        running=2,
        queued=5,
        capped=False,
        next_start_at=None,
        tokens=3,
        cap_hits=1,
        throttles=2,
        refusals=0,
        paused=True,
    )
    reading = figures.limits_reading(status, now=100.0)
    assert reading is not None
    facts = figures.TenantFacts(tenant="t", sizes={}, stats={}, limits=reading)
    values = figures.tenant_row(facts).values
    assert (values["cap"], values["rate"], values["qcap"]) == (3, "ok, 3 now", "-")
    assert (values["queued"], values["cap_hits"], values["throttles"]) == (5, 1, 2)
    assert reading["paused"] is True
    later = figures.limits_reading(attrs.evolve(status, next_start_at=100.5, tokens=0), now=100.0)
    assert later is not None
    assert later["next_start_in"] == pytest.approx(0.5)
    late = figures.TenantFacts(tenant="t", sizes={}, stats={}, limits=later)
    assert figures.tenant_row(late).values["rate"] == "throttled, next in 0.50 s"
    assert figures.limits_reading(None) is None


def test_limit_keys_on_the_tenants_page(env: Env) -> None:
    """Limits by key (ADR 79): each key with its limits and its tasks running and parked."""
    q = env.queue
    q.set_key_limits("export", max_running=1)
    q.push_batch([Task.create("acme", limit_key="export") for _ in range(3)])
    assert q.claim() is not None
    assert q.claim() is None  # the claim meets the other two: parked
    with env.client() as client:
        html = client.get("/tenants").text
    row = re.search(r'<tr data-key="export">(.*?)</tr>', html, re.S)
    assert row is not None, html
    assert re.findall(r"<td[^>]*>([^<]*)</td>", row.group(1)) == [
        "export",
        "max_running 1 per tenant",
        "1",
        "2",
    ]
    with env.client() as client:
        assert "data-key" not in client.get("/tenants?partial=table").text
