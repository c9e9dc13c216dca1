"""Flow-control limits in the config (ADR 28): ``queue.tenant_limits``, the tiers' limit
defaults, queue-wide ``queue.limits``; typed errors naming the field; applied by
``from_config`` / ``apply_tenant_config`` only."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from fairque_core import (
    ConfigurationError,
    FairQueue,
    FairQueueConfig,
    QueueConfig,
    RedisConfig,
    TierConfig,
)
from fairque_core.domain.limits import Limits
from fairque_core.settings.config import LimitsConfig, LimitSetting

NO_ENV: dict[str, str] = {}

YAML = """
redis:
  url: memory://
queue:
  name: limited
  tiers:
    free: {weight: 1, rank: 0, max_running: 2, max_queued: 10000}
    pro: {weight: 4, rank: 1, rate: 100, burst: 20}
  tenant_tiers: {bob: pro}
  tenant_limits:
    acme: {max_running: 5, rate: 50, burst: 10}
    bob: {max_queued: 300}
  limits: {max_running: 100, rate: 500.5}
"""


def _error(queue: dict[str, Any], env: dict[str, str] | None = None) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as info:
        FairQueueConfig.from_dict({"queue": queue}, env=env or NO_ENV)
    return info.value


def test_yaml_limits_load_and_become_set_limits_calls(tmp_path: Path) -> None:
    path = tmp_path / "fq.yaml"
    path.write_text(YAML, encoding="utf-8")
    config = FairQueueConfig.from_yaml(path, env=NO_ENV).queue
    assert config.tenant_limits["acme"] == LimitsConfig(max_running=5, rate=50.0, burst=10)
    assert config.tiers["free"].max_running == 2
    assert config.limits == LimitsConfig(max_running=100, rate=500.5)
    assert config.limit_settings() == [
        LimitSetting({"max_running": 100, "rate": 500.5}),
        LimitSetting({"max_running": 2, "max_queued": 10000}, tier=0),
        LimitSetting({"rate": 100.0, "burst": 20}, tier=1),
        LimitSetting({"max_running": 5, "rate": 50.0, "burst": 10}, tenant="acme"),
        LimitSetting({"max_queued": 300}, tenant="bob"),
    ]


def test_no_limits_means_no_calls() -> None:
    config = QueueConfig(tiers={"free": TierConfig(weight=2.0)})
    assert config.limit_settings() == []


def test_round_trip_leaves_unset_limits_out(tmp_path: Path) -> None:
    path = tmp_path / "fq.yaml"
    path.write_text(YAML, encoding="utf-8")
    config = FairQueueConfig.from_yaml(path, env=NO_ENV)
    data = config.to_dict()["queue"]
    assert data["tiers"]["pro"] == {"weight": 4.0, "rank": 1, "rate": 100.0, "burst": 20}
    assert data["tenant_limits"]["bob"] == {"max_queued": 300}
    assert data["limits"] == {"max_running": 100, "rate": 500.5}
    assert FairQueueConfig.from_dict(config.to_dict(), env=NO_ENV) == config
    out = tmp_path / "out.yaml"
    config.to_yaml(out)
    assert FairQueueConfig.from_yaml(out, env=NO_ENV) == config
    assert FairQueueConfig().to_dict()["queue"]["limits"] == {}


@pytest.mark.parametrize(
    ("queue", "path", "value"),
    [
        ({"tenant_limits": {"a": {"max_running": 0}}}, "queue.tenant_limits.a.max_running", 0),
        ({"tenant_limits": {"a": {"max_running": -3}}}, "queue.tenant_limits.a.max_running", -3),
        ({"tenant_limits": {"a": {"rate": 0}}}, "queue.tenant_limits.a.rate", 0.0),
        ({"tenant_limits": {"a": {"rate": 1e9}}}, "queue.tenant_limits.a.rate", 1e9),
        ({"tenant_limits": {"a": {"rate": 1e-300}}}, "queue.tenant_limits.a.rate", 1e-300),
        ({"tenant_limits": {"a": {"burst": 2.5}}}, "queue.tenant_limits.a.burst", 2.5),
        ({"tenant_limits": {"a": {"burst": True}}}, "queue.tenant_limits.a.burst", True),
        (
            {"tenant_limits": {"a": {"max_queued": 10**12}}},
            "queue.tenant_limits.a.max_queued",
            10**12,
        ),
        ({"tenant_limits": {"a": {"rate": "fast"}}}, "queue.tenant_limits.a.rate", "fast"),
        ({"tenant_limits": {"a b": {"rate": 1}}}, "queue.tenant_limits.a b", "a b"),
        ({"tiers": {"free": {"max_running": 0}}}, "queue.tiers.free.max_running", 0),
        ({"tiers": {"free": {"rate": -1}}}, "queue.tiers.free.rate", -1.0),
        ({"limits": {"max_running": 10**7}}, "queue.limits.max_running", 10**7),
        ({"limits": {"max_queued": 5}}, "queue.limits.max_queued", 5),
    ],
)
def test_bad_limits_name_the_field(queue: dict[str, Any], path: str, value: object) -> None:
    error = _error(queue)
    assert error.path == path
    assert error.value == value
    assert path in str(error)


def test_nan_and_infinite_rates_are_refused() -> None:
    for bad in (math.nan, math.inf):
        error = _error({"tenant_limits": {"a": {"rate": bad}}})
        assert error.path == "queue.tenant_limits.a.rate"


def test_unknown_limit_keys_are_named() -> None:
    error = _error({"tenant_limits": {"a": {"max_runing": 1}}})
    assert error.path == "queue.tenant_limits.a.max_runing"
    assert _error({"tiers": {"pro": {"ratee": 1}}}).path == "queue.tiers.pro.ratee"


def test_tiers_sharing_a_rank_must_agree_on_limits() -> None:
    error = _error({"tiers": {"free": {"max_running": 2}, "pro": {"weight": 4}}})
    assert error.path == "queue.tiers.pro"
    assert "rank 0" in str(error)
    same = {"tiers": {"a": {"max_running": 2}, "b": {"weight": 4, "max_running": 2}}}
    config = FairQueueConfig.from_dict({"queue": same}, env=NO_ENV).queue
    assert config.limit_settings() == [LimitSetting({"max_running": 2}, tier=0)]


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(ConfigurationError, match="rate"):
        LimitsConfig(rate=-1.0)
    with pytest.raises(ConfigurationError, match="max_running"):
        TierConfig(max_running=0)
    with pytest.raises(ConfigurationError) as info:
        QueueConfig(tenant_limits={"a": {"max_running": 1}})  # type: ignore[dict-item]
    assert info.value.path == "queue.tenant_limits.a"


def test_limits_from_the_environment() -> None:
    env = {
        "FAIRQUE_QUEUE__TENANT_LIMITS": '{"a": {"max_running": 2, "rate": 5}}',
        "FAIRQUE_QUEUE__LIMITS": '{"rate": 100}',
    }
    config = FairQueueConfig.from_dict({}, env=env).queue
    assert config.tenant_limits == {"a": LimitsConfig(max_running=2, rate=5.0)}
    assert config.limits == LimitsConfig(rate=100.0)
    bad = {"FAIRQUE_QUEUE__LIMITS": '{"rate": -1}'}
    with pytest.raises(ConfigurationError) as info:
        FairQueueConfig.from_dict({}, env=bad)
    assert info.value.path == "queue.limits.rate"


def test_from_config_applies_the_limits(tmp_path: Path) -> None:
    path = tmp_path / "fq.yaml"
    path.write_text(YAML, encoding="utf-8")
    with FairQueue.from_config(path) as queue:
        acme = queue.get_tenant_limits("acme")
        assert acme.own == Limits(max_running=5, rate=50.0, burst=10)
        assert acme.effective == Limits(max_running=5, rate=50.0, burst=10, max_queued=10000)
        bob = queue.get_tenant_limits("bob")  # tier pro (rank 1) and its own max_queued
        assert bob.effective == Limits(rate=100.0, burst=20, max_queued=300)
        newcomer = queue.get_tenant_limits("zed")  # rank 0: the free tier's defaults
        assert newcomer.effective == Limits(max_running=2, max_queued=10000)


def test_apply_sets_only_the_fields_the_config_gives() -> None:
    config = FairQueueConfig(
        redis=RedisConfig(url="memory://"),
        queue=QueueConfig(tenant_limits={"acme": LimitsConfig(max_running=3)}),
    )
    with FairQueue.from_config(config) as queue:
        queue.set_tenant_limits("acme", rate=7.0)  # set at run time
        queue.apply_tenant_config()
        assert queue.get_tenant_limits("acme").own == Limits(max_running=3, rate=7.0)
