"""OpenTelemetryMetrics.observe_fairness: the fairness gauges, read from a queue's
``get_tenant_fairness`` through the SDK's in-memory reader (no globals set)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from fairque_core import FairQueue, InMemoryBackend, Message, Priority
from fairque_core.domain.tenant_figures import TenantFairness
from fairque_plugins import OpenTelemetryMetrics
from fairque_plugins.fairness_metrics import MIN_READING_SECONDS
from fairque_plugins.metrics import OTHER_TENANT


def collect(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out[metric.name] = list(metric.data.data_points)
    return out


def by_tenant(points: list[Any]) -> dict[str, float]:
    return {p.attributes["tenant"]: p.value for p in points}


def _queue() -> FairQueue:
    backend = InMemoryBackend(queue="orders")
    backend.set_tenant_weight("heavy", 3.0)
    for tenant in ("heavy", "light", "pinned"):
        backend.push_batch(
            [
                Message(
                    task_id=f"{tenant}-{i}", tenant=tenant, priority=Priority.NORMAL, body=b"{}"
                )
                for i in range(100)
            ]
        )
    for _ in range(3):
        backend.claim(assigned=["pinned"])
    return FairQueue(backend)


def _drain(queue: FairQueue, n: int, **claim: Any) -> None:
    for _ in range(n):
        [c] = queue.backend.claim(**claim)
        queue.backend.finish(c.message.task_id, c.lease.token)


class Counting:
    def __init__(self, queue: FairQueue) -> None:
        self.queue = queue
        self.calls = 0

    def __call__(self) -> list[TenantFairness]:
        self.calls += 1
        return self.queue.get_tenant_fairness(limit=1000)


def test_per_tenant_gauges_jain_and_one_read_per_interval() -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    # a TTL of 0 still reads once per collection: fairness readings are at least
    # MIN_READING_SECONDS apart (a reading per callback gave 7 reads and no window)
    plugin = OpenTelemetryMetrics(meters, stats_ttl_seconds=0.0)
    queue = _queue()
    source = Counting(queue)
    plugin.observe_fairness(source, queue="orders")
    got = collect(reader)
    assert source.calls == 1  # one reading for every instrument of the collection
    assert by_tenant(got["fairque.tenant.lag"]) == {"heavy": 0.0, "light": 0.0, "pinned": 3.0}
    assert by_tenant(got["fairque.tenant.ready"]) == {"heavy": 100, "light": 100, "pinned": 97}
    assert set(by_tenant(got["fairque.tenant.oldest_ready_age"])) == {"heavy", "light", "pinned"}
    starving = {
        (p.attributes["tenant"], p.attributes.get("reason"), p.value)
        for p in got["fairque.tenant.starving"]
    }
    assert starving == {("heavy", None, 0), ("light", None, 0), ("pinned", "lag", 1)}
    assert [p.value for p in got["fairque.queue.starving_tenants"]] == [1]
    assert "fairque.queue.fairness.jain" not in got  # one reading: no window yet
    assert "fairque.tenant.share_ratio" not in got
    assert {p.attributes["queue"] for p in got["fairque.tenant.lag"]} == {"orders"}

    # shared workers serve pinned until the others reach its pass, then all three by weight
    _drain(queue, 12)  # heavy 9 turns, light 3: both reach pinned's pass
    time.sleep(MIN_READING_SECONDS + 0.01)
    collect(reader)
    _drain(queue, 50)
    time.sleep(MIN_READING_SECONDS + 0.01)
    got = collect(reader)
    assert source.calls == 3
    ratios = by_tenant(got["fairque.tenant.share_ratio"])
    assert set(ratios) == {"heavy", "light", "pinned"}
    assert ratios == pytest.approx({"heavy": 1.0, "light": 1.0, "pinned": 1.0})
    (jain,) = got["fairque.queue.fairness.jain"]
    assert jain.value == pytest.approx(1.0)
    assert dict(jain.attributes) == {"queue": "orders"}
    assert [p.value for p in got["fairque.queue.starving_tenants"]] == [0]
    meters.shutdown()


def test_the_tenant_cap_keeps_the_worst_case_and_a_failing_source_is_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    plugin = OpenTelemetryMetrics(meters, max_tenants=1, stats_ttl_seconds=3600)
    queue = _queue()
    plugin.observe_fairness(lambda: queue.get_tenant_fairness(["light", "heavy", "pinned"]))

    def broken() -> list[TenantFairness]:
        raise RuntimeError("backend down")

    plugin.observe_fairness(broken, queue="emails")
    got = collect(reader)
    assert by_tenant(got["fairque.tenant.lag"]) == {"light": 0.0, OTHER_TENANT: 3.0}
    assert by_tenant(got["fairque.tenant.ready"]) == {"light": 100, OTHER_TENANT: 197}
    assert [p.value for p in got["fairque.queue.starving_tenants"]] == [1]  # uncapped count
    assert {p.attributes["queue"] for p in got["fairque.tenant.lag"]} == {"default"}
    assert "fairness source for queue 'emails' failed" in caplog.text
    meters.shutdown()


def test_without_the_tenant_attribute_the_queue_worst_case_is_reported() -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    plugin = OpenTelemetryMetrics(meters, tenant_attribute=False)
    queue = _queue()
    plugin.observe_fairness(queue.get_tenant_fairness, queue="orders")
    got = collect(reader)
    (lag,) = got["fairque.tenant.lag"]
    assert (dict(lag.attributes), lag.value) == ({"queue": "orders"}, 3.0)
    (starving,) = got["fairque.tenant.starving"]
    assert (dict(starving.attributes), starving.value) == ({"queue": "orders", "reason": "lag"}, 1)
    meters.shutdown()


def test_a_slow_source_is_read_once_per_collection() -> None:
    """The TTL counted from the start of a reading: a source slower than the TTL was read
    again by every gauge callback of the same scrape (7 reads, a 7 s scrape, no window)."""
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    plugin = OpenTelemetryMetrics(meters, stats_ttl_seconds=MIN_READING_SECONDS)
    queue = _queue()
    source = Counting(queue)

    def slow() -> Any:
        time.sleep(MIN_READING_SECONDS + 0.05)
        return source()

    plugin.observe_fairness(slow, queue="orders")
    collect(reader)
    assert source.calls == 1


def test_a_limited_tenant_is_its_own_series_and_left_out_of_jain() -> None:
    """A capped tenant reads limited (reason cap) and is not compared: the others' Jain is 1."""
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    plugin = OpenTelemetryMetrics(meters, stats_ttl_seconds=0.0)
    backend = InMemoryBackend(queue="orders")
    backend.set_limits({"max_running": 1}, tenant="capped")
    for tenant in ("capped", "a", "b"):
        backend.push_batch(
            [
                Message(
                    task_id=f"{tenant}-{i}", tenant=tenant, priority=Priority.NORMAL, body=b"{}"
                )
                for i in range(50)
            ]
        )
    queue = FairQueue(backend)
    backend.claim(assigned=["capped"])  # its one slot, held throughout
    plugin.observe_fairness(lambda: queue.get_tenant_fairness(limit=1000), queue="orders")
    got = collect(reader)
    limited = {
        (p.attributes["tenant"], p.attributes.get("reason"), p.value)
        for p in got["fairque.tenant.limited"]
    }
    assert limited == {("capped", "cap", 1), ("a", None, 0), ("b", None, 0)}
    _drain(queue, 20)
    time.sleep(MIN_READING_SECONDS + 0.01)
    got = collect(reader)
    (jain,) = got["fairque.queue.fairness.jain"]
    assert jain.value == pytest.approx(1.0)  # a and b, 10 each; capped counted read 0.67
    assert set(by_tenant(got["fairque.tenant.share_ratio"])) == {"a", "b"}
    assert ("capped", "cap", 1) in {
        (p.attributes["tenant"], p.attributes.get("reason"), p.value)
        for p in got["fairque.tenant.limited"]
    }
    meters.shutdown()
