"""Hypothesis strategies for fairness tests: tenants, weights, tiers, loads, task mixes.

Needs ``hypothesis`` (``pip install "fairque[testing]"`` brings it). Every strategy draws
values the queue accepts (valid tenant ids, weights in the queue's range) and sizes small
enough for one example to run in well under a second on the in-memory model::

    from hypothesis import given
    from fairque_testing import strategies as fst

    @given(tenants=fst.tenants(), data=st.data())
    def test_something(tenants, data):
        load = data.draw(fst.loads([t.name for t in tenants]))
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

try:
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        'fairque_testing.strategies needs hypothesis: pip install "fairque[testing]"'
    ) from exc

from fairque_core.domain.enums import Priority
from fairque_testing.load import Arrival, Load

__all__ = [
    "TenantSpec",
    "arrivals",
    "bursts",
    "delays",
    "floods",
    "idle_and_return",
    "late_arrivals",
    "load_shapes",
    "loads",
    "priorities",
    "steady_streams",
    "task_mixes",
    "tenant_ids",
    "tenants",
    "weights",
    "weights_of",
]

_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


@attrs.frozen
class TenantSpec:
    """A tenant of a fairness test: its id, weight and tier (0 unless tiers are drawn)."""

    name: str
    weight: float = 1.0
    tier: int = 0


def weights_of(specs: Sequence[TenantSpec]) -> dict[str, float]:
    """``{name: weight}`` of drawn tenants (what :func:`fairness_report` takes)."""
    return {spec.name: spec.weight for spec in specs}


def tenant_ids(prefix: str = "t") -> st.SearchStrategy[str]:
    """Valid tenant ids: ``prefix`` then 1-12 lower-case letters and digits."""
    return st.text(_ID_ALPHABET, min_size=1, max_size=12).map(lambda s: prefix + s)


def weights(
    *, min_value: float = 0.1, max_value: float = 100.0, integral: bool = False
) -> st.SearchStrategy[float]:
    """Tenant weights in ``[min_value, max_value]`` (the queue accepts 0.001 to 1e6).

    ``integral=True`` draws whole numbers only (as tier tables usually are).
    """
    if integral:
        low, high = max(1, int(min_value)), max(1, int(max_value))
        return st.integers(low, high).map(float)
    return st.floats(min_value, max_value, allow_nan=False, allow_infinity=False)


def tenants(
    *,
    min_size: int = 2,
    max_size: int = 8,
    weight: st.SearchStrategy[float] | None = None,
    tiers: int = 1,
) -> st.SearchStrategy[list[TenantSpec]]:
    """A list of tenants with distinct ids, each with a drawn weight and tier.

    ``tiers`` is the number of tiers to draw from (tier 0 up to ``tiers - 1``); with the default
    of 1 every tenant is in tier 0.
    """
    if tiers < 1:
        raise ValueError("tiers must be >= 1")
    weight = weight if weight is not None else weights()
    spec = st.builds(
        TenantSpec,
        tenant_ids(),
        weight,
        st.integers(0, tiers - 1),
    )
    return st.lists(spec, min_size=min_size, max_size=max_size, unique_by=lambda s: s.name)


def priorities(*, critical: bool = False) -> st.SearchStrategy[Priority]:
    """Task priorities 1-5 (with CRITICAL too when ``critical``)."""
    top = Priority.CRITICAL if critical else Priority.VERY_HIGH
    return st.sampled_from([p for p in Priority if p <= top])


def delays(*, max_seconds: float = 5.0) -> st.SearchStrategy[float]:
    """Delays: mostly 0 (ready at once), else whole milliseconds up to ``max_seconds``."""
    return st.one_of(
        st.just(0.0),
        st.integers(1, int(max_seconds * 1000)).map(lambda ms: ms / 1000),
    )


# ---- load shapes (each for one tenant) --------------------------------------------------------


def floods(tenant: str, *, min_count: int = 20, max_count: int = 200) -> st.SearchStrategy[Load]:
    """A backlog pushed at once, in round 0."""
    return st.integers(min_count, max_count).map(lambda n: Load.flood(tenant, n))


def bursts(tenant: str, *, max_size: int = 30, max_times: int = 5) -> st.SearchStrategy[Load]:
    """Bursts of equal size at a fixed interval."""
    return st.builds(
        lambda size, every, times, start: Load.burst(
            tenant, size, every=every, times=times, start=start
        ),
        st.integers(1, max_size),
        st.integers(1, 50),
        st.integers(1, max_times),
        st.integers(0, 20),
    )


def steady_streams(tenant: str, *, max_rounds: int = 100) -> st.SearchStrategy[Load]:
    """One to three tasks every round for a while."""
    return st.builds(
        lambda per_round, rounds, start: Load.steady(
            tenant, per_round=per_round, rounds=rounds, start=start
        ),
        st.integers(1, 3),
        st.integers(1, max_rounds),
        st.integers(0, 20),
    )


def late_arrivals(tenant: str, *, max_round: int = 100) -> st.SearchStrategy[Load]:
    """A tenant that first shows up after the others, with a few tasks."""
    return st.builds(
        lambda at, count: Load.late(tenant, count, at=at),
        st.integers(1, max_round),
        st.integers(1, 10),
    )


def idle_and_return(tenant: str, *, max_gap: int = 100) -> st.SearchStrategy[Load]:
    """A few tasks, a pause, then more."""
    return st.builds(
        lambda first, then, gap: Load.idle_and_return(tenant, first, then, gap=gap),
        st.integers(1, 10),
        st.integers(1, 30),
        st.integers(1, max_gap),
    )


def load_shapes(tenant: str) -> st.SearchStrategy[Load]:
    """Any one of the shapes above for ``tenant``."""
    return st.one_of(
        floods(tenant),
        bursts(tenant),
        steady_streams(tenant),
        late_arrivals(tenant),
        idle_and_return(tenant),
    )


def loads(tenant_names: Sequence[str]) -> st.SearchStrategy[Load]:
    """One drawn shape per tenant, added up (every tenant in ``tenant_names`` pushes)."""
    if not tenant_names:
        raise ValueError("loads needs at least one tenant")
    parts = [load_shapes(name) for name in tenant_names]
    return st.tuples(*parts).map(lambda drawn: sum(drawn, Load()))


# ---- task mixes ---------------------------------------------------------------------------------


def arrivals(
    tenant_names: Sequence[str],
    *,
    max_round: int = 50,
    max_count: int = 20,
    priority: st.SearchStrategy[Priority] | None = None,
    delay: st.SearchStrategy[float] | None = None,
) -> st.SearchStrategy[Arrival]:
    """One arrival of a drawn tenant, round, count, priority and delay."""
    return st.builds(
        Arrival,
        st.sampled_from(list(tenant_names)),
        st.integers(0, max_round),
        st.integers(1, max_count),
        priority if priority is not None else priorities(),
        delay if delay is not None else delays(),
    )


def _as_load(drawn: list[Arrival]) -> Load:
    return Load(tuple(drawn))


def task_mixes(
    tenant_names: Sequence[str],
    *,
    min_size: int = 1,
    max_size: int = 30,
    max_round: int = 50,
    max_delay: float = 5.0,
) -> st.SearchStrategy[Load]:
    """A mix of arrivals over the tenants, with priorities 1-5 and delays."""
    if not tenant_names:
        raise ValueError("task_mixes needs at least one tenant")
    one = arrivals(tenant_names, max_round=max_round, delay=delays(max_seconds=max_delay))
    return st.lists(one, min_size=min_size, max_size=max_size).map(_as_load)
