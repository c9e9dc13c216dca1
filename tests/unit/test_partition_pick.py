"""The partition picker and the partition layout (ADR 34), without a server."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairque_core.domain.errors import ConfigurationError, ScriptContractError
from fairque_core.settings.config import MAX_PARTITIONS, QueueConfig
from fairque_redis.keys import CLUSTER_SLOTS, KeySpace, partition_tag
from fairque_redis.partitioned.picker import PartitionLoad, PartitionPicker, TierLoad, parse_summary


def _key_slot(key: str) -> int:
    from redis.crc import key_slot

    return int(key_slot(key.encode()))


def _load(*tiers: tuple[int, int, float], now: int = 1000, delayed: int = -1) -> PartitionLoad:
    return PartitionLoad(now, 0, False, delayed, -1, tuple(TierLoad(*t) for t in tiers))


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_claims_follow_the_active_weight_of_each_partition() -> None:
    picker = PartitionPicker(3, refresh_claims=10**9, refresh_seconds=10**9)
    picker.update([_load((0, 1, 1.0)), _load((0, 3, 3.0)), _load((0, 6, 6.0))])
    asked: Counter[int] = Counter()
    for _ in range(1000):
        first = picker.order()[0]
        asked[first] += 1
        picker.served(first, 5, 5)
    assert [asked[n] for n in range(3)] == [100, 300, 600]


@given(
    weights=st.lists(st.floats(0.5, 50.0), min_size=2, max_size=8),
    batch=st.integers(1, 20),
    calls=st.integers(1, 400),
)
def test_no_partition_trails_its_share_by_more_than_a_batch(
    weights: list[float], batch: int, calls: int
) -> None:
    """The stride bound behind ADR 34: with fixed weights, after any number of claim calls
    each partition's served count is within one batch (plus the random start) of its share."""
    picker = PartitionPicker(len(weights), refresh_claims=10**9, refresh_seconds=10**9)
    picker.update([_load((0, 1, w)) for w in weights])
    served = [0] * len(weights)
    for _ in range(calls):
        first = picker.order()[0]
        served[first] += batch
        picker.served(first, batch, batch)
    total = sum(served)
    for n, w in enumerate(weights):
        share = total * w / sum(weights)
        assert abs(served[n] - share) <= 2 * batch + w / min(weights) * batch


def test_a_dry_partition_gets_no_turn_until_the_next_refresh() -> None:
    picker = PartitionPicker(2, refresh_claims=10**9, refresh_seconds=10**9)
    picker.update([_load((0, 2, 2.0)), _load((0, 2, 2.0))])
    picker.served(0, 5, 3)  # short: ran dry
    assert picker.order() == [1]
    picker.update([_load((0, 2, 2.0)), _load((0, 2, 2.0))])
    assert sorted(picker.order()) == [0, 1]


def test_strict_tiers_serve_only_the_top_tier_across_partitions() -> None:
    picker = PartitionPicker(3)
    picker.update([_load((0, 5, 5.0)), _load((0, 1, 1.0), (2, 1, 1.0)), _load((1, 4, 4.0))])
    assert picker.order() == [1]


def test_due_work_and_pauses() -> None:
    picker = PartitionPicker(3)
    due = _load(now=1000, delayed=900)
    not_due = _load(now=1000, delayed=2000)
    paused = PartitionLoad(1000, 3, True, -1, -1, (TierLoad(0, 3, 3.0),))
    picker.update([due, not_due, paused])
    assert picker.order() == [0]  # due scheduled work gets turns so a claim moves it


def test_freshness_by_claims_time_touch_and_clock() -> None:
    clock = _Clock()
    picker = PartitionPicker(1, refresh_claims=3, refresh_seconds=0.1, monotonic=clock)
    assert picker.stale()
    picker.update([_load((0, 1, 1.0))], clock_mark=5.0)
    assert not picker.stale(5.0)
    assert picker.stale(6.0)  # an injected clock moved
    for _ in range(3):
        picker.served(0, 1, 1)
    assert picker.stale(5.0)
    picker.update([_load((0, 1, 1.0))], clock_mark=5.0)
    clock.now = 0.2
    assert picker.stale(5.0)
    picker.update([_load((0, 1, 1.0))], clock_mark=5.0)
    picker.touch()
    assert picker.stale(5.0)


def test_summary_replies_parse_and_sampled_tiers_scale() -> None:
    # now, ready, paused, delayed head, parked head, 2 tiers: tier 0 with 2 of 2 sampled
    # (weights 1 and 4), tier 3 with 100 active and 2 sampled (weights 2 and 2)
    reply = [1000, 7, 0, -1, 950, 2, 0, 2, 2, 1_000_000, 250_000, 3, 100, 2, 500_000, 500_000]
    load = parse_summary(reply)
    assert load.due  # the parked head is due
    assert load.top_tier == 3
    assert load.weight(0) == pytest.approx(5.0)
    assert load.weight(3) == pytest.approx(200.0)
    assert parse_summary([1, 0, 0, -1, -1, 1, 0, 1, 1, 0]).weight(0) == 1.0  # no stride: 1
    with pytest.raises(ScriptContractError):
        parse_summary([1, 0, 0, -1, -1, 1, 0, 3, 3, 1])


@pytest.mark.parametrize("partitions", [2, 3, 5, 16, 100])
def test_partition_tags_fall_in_their_slot_ranges(partitions: int) -> None:
    for n in range(partitions):
        keys = KeySpace("orders", partition=n, partitions=partitions)
        slot = _key_slot(keys.meta)
        assert n * CLUSTER_SLOTS // partitions <= slot < (n + 1) * CLUSTER_SLOTS // partitions
        assert keys.tag == partition_tag("orders", n, partitions)
        assert keys.tag.startswith(f"orders:{n}")
    # the plain and the older partition layouts are unchanged
    assert KeySpace("orders").prefix == "fq:{orders}:"
    assert KeySpace("orders", partition=2).prefix == "fq:{orders:2}:"


def test_three_partitions_land_on_three_masters_of_the_default_split() -> None:
    from fairque_redis.servers.cluster import CLUSTER_SLOT_RANGES

    rng = random.Random(7)
    for _ in range(20):
        name = f"q{rng.randrange(10**9)}"
        owners = set()
        for n in range(3):
            slot = _key_slot(KeySpace(name, partition=n, partitions=3).meta)
            owners.add(
                next(i for i, (lo, hi) in enumerate(CLUSTER_SLOT_RANGES) if lo <= slot <= hi)
            )
        assert owners == {0, 1, 2}


@pytest.mark.parametrize("bad", [0, -1, MAX_PARTITIONS + 1, 2.0, True, "3"])
def test_the_partition_count_is_checked(bad: object) -> None:
    with pytest.raises(ConfigurationError):
        QueueConfig(partitions=bad)  # type: ignore[arg-type]
    assert QueueConfig().partitions == 1
    assert QueueConfig(partitions=MAX_PARTITIONS).partitions == MAX_PARTITIONS
