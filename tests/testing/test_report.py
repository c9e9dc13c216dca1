"""fairness_report and assert_fair on hand-computed traces."""

from __future__ import annotations

import math

import pytest

from fairque_testing import (
    Dispatched,
    Held,
    Ready,
    TraceEvent,
    Unheld,
    assert_fair,
    fairness_report,
)


def jain(xs: list[float]) -> float:
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def test_round_robin_of_two_equal_tenants() -> None:
    # Both backlogged from the start (a plain list). Dispatches 1-19 are shared half and half
    # (V grows by 1/2 each); a's last task goes with its 10th dispatch (19th overall), owed
    # 19/2 = 9.5; its tail keeps it owed half of the 20th (then the fluid reference has served
    # its 10): 10 each.
    report = fairness_report(["a", "b"] * 10, {"a": 1, "b": 1}, min_owed=5)
    a, b = report.tenants["a"], report.tenants["b"]
    assert report.dispatches == 20
    assert (a.dispatches, b.dispatches) == (10, 10)
    assert a.owed == pytest.approx(10.0)
    assert b.owed == pytest.approx(10.0)
    assert a.share_ratio == pytest.approx(1.0)
    assert b.share_ratio == pytest.approx(1.0)
    assert report.jain == pytest.approx(1.0)
    # b is owed half a dispatch before each of its turns and has had one fewer than a.
    assert (a.max_lag, b.max_lag) == pytest.approx((0.0, 0.5))
    assert report.max_lag_tenant == "b"
    assert (a.newcomer_wait, b.newcomer_wait) == (0, 1)
    assert (a.max_gap, b.max_gap) == (1, 1)
    assert (a.share, a.weight_share) == (0.5, 0.5)
    assert a.judged
    assert b.judged
    assert report.stranded == {}
    assert report.waiting == []


def test_owed_adds_up_to_the_dispatches() -> None:
    report = fairness_report(["a", "b", "b", "c", "a", "b"] * 7, {"b": 3, "c": 0.5})
    assert math.fsum(f.owed for f in report.tenants.values()) == pytest.approx(42)
    assert sum(f.dispatches for f in report.tenants.values()) == 42


def test_weights_one_to_three() -> None:
    # a, b, b, b repeated: a's 25th dispatch is the 97th; until then every dispatch is owed
    # 1/4 to a and 3/4 to b (V = 97/4 = 24.25). a's tail keeps that split for the last three
    # dispatches (the fluid reference serves a's 25th by V = 25): 25 and 75.
    report = fairness_report(["a", "b", "b", "b"] * 25, {"a": 1, "b": 3})
    a, b = report.tenants["a"], report.tenants["b"]
    assert a.owed == pytest.approx(25.0)
    assert b.owed == pytest.approx(75.0)
    assert a.share_ratio == pytest.approx(1.0)
    assert b.share_ratio == pytest.approx(1.0)
    assert (a.weight, b.weight) == (1.0, 3.0)
    assert a.weight_share == pytest.approx(0.25)
    # a is served exactly when its owed amount reaches a whole dispatch: lag 0. b waited one
    # dispatch (owed 3/4 of it) before its first turn: lag 0.75, then 0.5, 0.25.
    assert a.max_lag == pytest.approx(0.0)
    assert b.max_lag == pytest.approx(0.75)
    assert_fair(report, tolerance=0.05)


def test_a_tenant_served_only_after_another_one_drains() -> None:
    report = fairness_report(["a"] * 30 + ["b"] * 30)
    a, b = report.tenants["a"], report.tenants["b"]
    # 30 dispatches shared half and half, then a's tail of one own turn (two dispatches)
    assert a.owed == pytest.approx(16.0)
    assert b.owed == pytest.approx(44.0)  # 15 of the first 30, 1 of the next 2, then 28 alone
    assert (a.share_ratio, b.share_ratio) == pytest.approx((30 / 16, 30 / 44))
    assert report.jain == pytest.approx(jain([30 / 16, 30 / 44]))
    assert b.max_lag == pytest.approx(15.0)
    assert report.max_newcomer_wait == 30
    assert report.max_newcomer_wait_tenant == "b"
    assert b.max_gap == 30


def test_a_newcomer_in_a_trace() -> None:
    trace: list[TraceEvent] = [
        Ready("a", 5),
        Dispatched("a"),
        Dispatched("a"),  # a alone: V = 2
        Ready("n", 1),  # n becomes backlogged at V = 2, after 2 dispatches
        Dispatched("a"),  # shared: V = 2.5
        Dispatched("n"),  # n is owed 0.5 before its turn, waited 1 dispatch; V = 3
        Dispatched("a"),
        Dispatched("a"),  # a alone again: V = 5
    ]
    report = fairness_report(trace, min_owed=1)
    a, n = report.tenants["a"], report.tenants["n"]
    assert n.owed == pytest.approx(1.0)
    assert a.owed == pytest.approx(5.0)
    assert n.share_ratio == pytest.approx(1.0)
    assert a.share_ratio == pytest.approx(1.0)
    assert n.newcomer_wait == 1
    assert n.max_lag == pytest.approx(0.5)
    assert report.max_lag == pytest.approx(0.5)
    assert report.jain == pytest.approx(1.0)


def test_busy_periods_restart_the_lag() -> None:
    # a goes idle after two dispatches and comes back: its second busy period starts at lag 0.
    trace: list[TraceEvent] = [
        Ready("a", 2),
        Ready("b", 10),
        *[Dispatched(t) for t in ("a", "b", "a", "b", "b", "b")],
        Ready("a", 1),
        Dispatched("b"),
        Dispatched("a"),
    ]
    report = fairness_report(trace)
    a = report.tenants["a"]
    assert a.busy_periods == 2
    assert a.newcomer_wait == 1  # one dispatch to b before each of a's busy periods was served
    assert a.max_lag == pytest.approx(0.5)


def test_tenants_restricts_the_report() -> None:
    dispatches = ["vip"] * 50 + ["a", "b"] * 20
    whole = fairness_report(dispatches)
    shared = fairness_report(dispatches, tenants=["a", "b"])
    assert whole.jain < 0.9
    assert set(shared.tenants) == {"a", "b"}
    assert shared.dispatches == 40
    assert shared.jain == pytest.approx(1.0)


def test_stranded_and_waiting_tenants() -> None:
    trace: list[TraceEvent] = [
        Ready("a", 3),
        Ready("b", 2),
        Dispatched("a"),
        Dispatched("a"),
        Dispatched("a"),
    ]
    report = fairness_report(trace, min_owed=1)
    b = report.tenants["b"]
    assert report.stranded == {"b": 2}
    assert report.waiting == ["b"]
    assert b.dispatches == 0
    assert b.owed == pytest.approx(1.5)
    assert b.share_ratio == 0.0
    assert b.newcomer_wait == 3
    assert b.max_lag == pytest.approx(1.5)
    with pytest.raises(AssertionError, match=r"ready tasks never dispatched: 'b': 2"):
        assert_fair(report, tolerance=1.0, min_jain=0)
    assert_fair(report, tolerance=1.0, min_jain=0, allow_stranded=True)


def test_a_dispatch_without_a_ready_event_counts_as_one_arriving_then() -> None:
    trace: list[TraceEvent] = [Ready("a", 1), Dispatched("a"), Dispatched("b")]
    report = fairness_report(trace, min_owed=0)
    assert report.tenants["b"].owed == pytest.approx(1.0)
    assert report.stranded == {}


def test_small_shares_are_not_judged() -> None:
    trace: list[TraceEvent] = [
        Ready("big", 40),
        *[Dispatched("big")] * 20,
        Ready("tiny", 1),
        Dispatched("tiny"),
        *[Dispatched("big")] * 20,
    ]
    report = fairness_report(trace)
    assert report.tenants["tiny"].owed == pytest.approx(1.0)  # half a dispatch, then its tail
    assert report.tenants["big"].judged
    assert not report.tenants["tiny"].judged
    assert report.judged == ["big"]
    assert report.jain == 1.0
    assert "tiny (not judged)" in report.table()


def test_empty_report() -> None:
    report = fairness_report([])
    assert report.dispatches == 0
    assert report.jain == 1.0
    assert report.max_lag == 0.0
    assert report.max_newcomer_wait == 0
    assert report.max_lag_tenant is None
    assert_fair(report)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="weight of 'a'"):
        fairness_report(["a"], {"a": 0})
    with pytest.raises(TypeError, match="one string"):
        fairness_report("abc")
    with pytest.raises(TypeError, match="trace event"):
        fairness_report([Ready("a"), 3])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tolerance"):
        assert_fair(fairness_report([]), tolerance=-1)
    unfair = fairness_report(["a"] * 30 + ["b"] * 30)
    for bad in ({"tolerance": float("nan")}, {"min_jain": float("nan")}, {"max_lag": "1"}):
        with pytest.raises(ValueError, match="must be a number"):  # NaN passed every check
            assert_fair(unfair, **bad)  # type: ignore[arg-type]


def test_a_weighted_tenant_the_list_never_names_was_starved() -> None:
    """A plain list says nothing of a tenant it never names: one given a weight (or named in
    ``tenants=``) counts as backlogged from the start, so total starvation fails."""
    report = fairness_report(["a"] * 100, {"a": 1, "b": 1})
    assert report.tenants["b"].dispatches == 0
    assert report.tenants["b"].judged
    assert report.stranded == {"b": 1}
    with pytest.raises(AssertionError, match="'b'"):
        assert_fair(report, tolerance=0.2, allow_stranded=True)
    named = fairness_report(["a"] * 100, tenants=["a", "c"])
    assert named.tenants["c"].dispatches == 0
    assert fairness_report(["a", "b"] * 20, {"a": 1, "b": 1}).tenants.keys() == {"a", "b"}


def test_assert_fair_message_names_the_worst_tenants() -> None:
    report = fairness_report(["a"] * 30 + ["b"] * 30 + ["c"] * 30, {"c": 2}, min_owed=5)
    with pytest.raises(AssertionError) as err:
        assert_fair(report, tolerance=0.05, max_lag=5, max_newcomer_wait=10)
    message = str(err.value)
    lines = message.splitlines()
    assert lines[0].startswith("fairness check failed (90 dispatches, 3 tenants")
    assert any("Jain index" in line and "is below 0.9500" in line for line in lines)
    assert "tenant 'a' (weight 1) got" in message
    assert "tenant 'c' (weight 2) got" in message
    assert "max lag" in message
    assert "exceeds 5" in message
    assert "newcomer wait 60 dispatches (tenant 'c') exceeds 10" in message
    table = lines[lines.index("worst tenants:") + 1 :]
    assert table[0].split()[:3] == ["tenant", "weight", "dispatches"]
    # most unfair first: a got 3x its share
    assert table[1].split()[0] == "a"


def test_assert_fair_passes_a_fair_report_and_uses_each_bound() -> None:
    report = fairness_report(["a", "b", "c"] * 50)
    assert_fair(report, tolerance=0.05, max_lag=1, max_newcomer_wait=2)
    with pytest.raises(AssertionError, match="newcomer wait 2 dispatches"):
        assert_fair(report, max_newcomer_wait=1)
    # c is owed 2/3 of a dispatch before each of its turns
    with pytest.raises(AssertionError, match=r"max lag 0.67 dispatches \(tenant 'c'\)"):
        assert_fair(report, max_lag=0.5)
    with pytest.raises(AssertionError, match="Jain index"):
        assert_fair(report, min_jain=1.01)


def test_str_has_the_summary_and_the_table() -> None:
    text = str(fairness_report(["a", "b"] * 20))
    first, header, *rows = text.splitlines()
    assert first.startswith("40 dispatches, 2 tenants (2 judged): Jain ")
    assert header.split()[0] == "tenant"
    assert [r.split()[0] for r in rows] == ["a", "b"]


def test_a_held_tenant_is_owed_nothing_while_held() -> None:
    # b is held by its rate after its first dispatch: a, alone backlogged meanwhile, is owed
    # every dispatch of that stretch, and b is not behind when it is let go.
    trace: list[TraceEvent] = [
        Ready("a", 20),
        Ready("b", 20),
        Dispatched("a"),
        Dispatched("b"),
        Held("b", "rate"),
        *[Dispatched("a")] * 8,
        Unheld("b"),
        *[Dispatched(t) for t in ("b", "a") * 5],
    ]
    held = fairness_report(trace, min_owed=1)
    a, b = held.tenants["a"], held.tenants["b"]
    assert b.held == 1
    assert a.owed + b.owed == pytest.approx(held.dispatches)
    assert a.owed == pytest.approx(1 + 8 + 5, abs=0.5)  # its half, then all 8, then its half
    assert b.share_ratio == pytest.approx(1.0, abs=0.2)
    assert held.max_newcomer_wait <= 1
    # the same order without the hold events: b looks starved for 8 dispatches
    blind = fairness_report([e for e in trace if isinstance(e, Ready | Dispatched)], min_owed=1)
    assert blind.tenants["b"].max_lag >= 4
    assert blind.tenants["b"].share_ratio < held.tenants["b"].share_ratio


def test_a_tenant_back_with_a_debt_is_a_newcomer_once_it_is_paid() -> None:
    # light (weight 1) is served once among heavy (weight 10) and comes back at once: its
    # finish tag is one unit ahead, which heavy's dispatches (0.1 each) pay off in ten. ADR 4
    # lets the queue pass light over until then; its newcomer wait counts from there.
    weights = {"heavy": 10, "light": 1}
    trace: list[TraceEvent] = [
        Ready("heavy", 40),
        Ready("light", 1),
        Dispatched("heavy"),
        Dispatched("light"),
        Ready("light", 1),  # back at once, with a debt
        *[Dispatched("heavy")] * 10,
        Dispatched("light"),
        *[Dispatched("heavy")] * 5,
    ]
    report = fairness_report(trace, weights, min_owed=1)
    light = report.tenants["light"]
    assert light.debt_returns == 1
    assert light.newcomer_wait <= 1  # was 10 when every return counted as a newcomer
    assert light.max_gap == 10  # the gap itself is still reported
    assert_fair(report, tolerance=1, min_jain=0, max_newcomer_wait=2, allow_stranded=True)


def test_a_newcomer_that_is_passed_over_still_fails() -> None:
    # the same tenants, but light comes back after heavy caught up: a newcomer, kept waiting
    weights = {"heavy": 10, "light": 1}
    trace: list[TraceEvent] = [
        Ready("heavy", 60),
        Ready("light", 1),
        Dispatched("heavy"),
        Dispatched("light"),
        *[Dispatched("heavy")] * 12,
        Ready("light", 1),  # no debt left: heavy's tag passed light's
        *[Dispatched("heavy")] * 20,
        Dispatched("light"),
    ]
    report = fairness_report(trace, weights, min_owed=1)
    assert report.tenants["light"].debt_returns == 0
    assert report.tenants["light"].newcomer_wait == 20
    with pytest.raises(AssertionError, match=r"newcomer wait 20 dispatches \(tenant 'light'\)"):
        assert_fair(report, tolerance=1, min_jain=0, max_newcomer_wait=3)


def test_held_and_unheld_events_of_other_tenants_are_dropped_with_tenants() -> None:
    trace: list[TraceEvent] = [Ready("a", 2), Held("x"), Dispatched("a"), Unheld("x")]
    report = fairness_report([*trace, Dispatched("a")], tenants=["a"])
    assert set(report.tenants) == {"a"}
    assert report.tenants["a"].held == 0
