"""The dashboard's pure parts: Jain's index, the SVG chart, the figures' n/a."""

from __future__ import annotations

import pytest

from fairque_dashboard import figures
from fairque_dashboard.charts import line_chart
from fairque_dashboard.sampler import jain_index


def test_jain_index() -> None:
    assert jain_index([]) is None
    assert jain_index([0.0, 0.0]) is None
    assert jain_index([5.0, 5.0, 5.0]) == pytest.approx(1.0)
    assert jain_index([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)


def test_line_chart() -> None:
    empty = line_chart([], caption="<x>")
    assert "collecting samples" in empty
    assert "&lt;x&gt;" in empty
    one = line_chart([(0.0, 3.0)], caption="c")
    assert "<circle" in one
    many = line_chart([(30.0, 0.5), (10.0, 0.25), (900.0, 9.0)], caption="c", percent=True)
    assert "<polyline" in many
    assert "100%" in many


def test_missing_figures_are_none() -> None:
    facts = figures.TenantFacts(tenant="t", sizes={}, stats={"claimed": 4})
    row = figures.tenant_row(facts)
    assert row.values["dispatched"] == 4
    for key in ("cap", "rate", "lag", "oldest", "p99", "weight"):
        assert row.values[key] is None
    later = figures.TenantFacts(
        tenant="t",
        sizes={"critical": 1, "normal": 2, "scheduled": 0, "leased": 1},
        stats={"claimed": 4, "lag": 2.5, "max_running": 3, "throttled": True},
    )
    values = figures.tenant_row(later).values
    assert (values["depth"], values["running"], values["cap"]) == (3, 1, 3)
    assert (values["lag"], values["rate"]) == (2.5, "throttled")


def test_sort_rows_puts_na_last() -> None:
    rows = [
        figures.tenant_row(figures.TenantFacts(tenant=t, sizes={}, stats=s))
        for t, s in [("a", {"claimed": 1}), ("b", {}), ("c", {"claimed": 5})]
    ]
    for descending in (True, False):
        ordered = [r.tenant for r in figures.sort_rows(rows, "dispatched", descending)]
        assert ordered[-1] == "b"
    assert [r.tenant for r in figures.sort_rows(rows, "dispatched", True)][:2] == ["c", "a"]
