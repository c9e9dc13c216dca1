"""Configuration: the seed's YAML, removed fields, round trips, env overrides, errors, secrets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from fairque_core import (
    ConfigurationError,
    FairQueueConfig,
    QueueConfig,
    RedisConfig,
    TierConfig,
    WorkerConfig,
)
from fairque_core.settings import loading as config_loading

# The seed's "Configuration File Example", verbatim (000_*.txt). It loads once its
# worker.assigned_users is spelled assigned_tenants (ADR 23's alias was removed before the first
# release); the fields of it that never had an effect are ignored with a DeprecationWarning each.
SEED_YAML = """\
redis:
  host: "localhost"
  port: 6379
  db: 0
  password: null
  username: null
  socket_timeout: 5.0
  socket_connect_timeout: 5.0
  health_check_interval: 30
  decode_responses: true

worker:
  id: "worker-001"
  assigned_users: ["user:1", "user:3", "user:5"]
  steal_targets: ["user:2", "user:4", "user:6", "user:7"]
  poll_interval_seconds: 1.0
  task_timeout_seconds: 300.0
  max_concurrent_tasks: 10
  graceful_shutdown_timeout: 30.0

queue:
  stats_prefix: "fq"
  lua_script_cache_size: 100
  max_retry_attempts: 3
  default_task_timeout: 300.0
  default_max_retries: 3
  enable_pipeline_optimization: true
  pipeline_batch_size: 100
  pipeline_timeout: 5.0
  queue_cleanup_interval: 3600
  stats_aggregation_interval: 300
"""

NO_ENV: dict[str, str] = {}


@pytest.fixture
def seed_file(tmp_path: Path) -> Path:
    path = tmp_path / "fairque_config.yaml"
    path.write_text(SEED_YAML.replace("assigned_users:", "assigned_tenants:"), encoding="utf-8")
    return path


def _error(data: dict[str, Any], env: dict[str, str] | None = None) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as info:
        FairQueueConfig.from_dict(data, env=env or NO_ENV)
    return info.value


# ---------------------------------------------------------------------- loading


def test_seed_yaml_loads(seed_file: Path) -> None:
    with pytest.warns(DeprecationWarning, match="was removed") as caught:
        config = FairQueueConfig.from_yaml(seed_file, env=NO_ENV)
    assert config.redis == RedisConfig(host="localhost", port=6379, db=0)
    assert config.worker.id == "worker-001"
    assert config.worker.assigned_tenants == ["user:1", "user:3", "user:5"]
    assert config.worker.steal_targets == ["user:2", "user:4", "user:6", "user:7"]
    assert config.worker.max_concurrent_tasks == 10
    # fields the seed does not name keep their defaults
    assert config.queue == QueueConfig()
    assert isinstance(config.worker.poll_interval_seconds, float)
    # one warning per removed field, blamed on the caller
    named = {str(w.message).split(" ", 1)[0] for w in caught}
    assert named == {
        f"{section}.{key}"
        for section, keys in config_loading.REMOVED_FIELDS.items()
        for key in keys
    }
    assert {w.filename for w in caught} == {__file__}


# ---------------------------------------------------------------------- removed fields

# Every field a config class has is read somewhere in src/ (checked by hand for this list); the
# seed's fields that never had an effect are gone from the classes.
REMOVED = [
    ("redis", "decode_responses", True, "raw bytes"),
    ("queue", "stats_prefix", "fq", "queue.name"),
    ("queue", "lua_script_cache_size", 100, "Lua scripts"),
    ("queue", "max_retry_attempts", 3, "max_retries"),
    ("queue", "default_max_retries", 3, "fairque_plugins.RetryPolicy(max_retries=N)"),
    ("queue", "default_task_timeout", 300.0, "worker.task_timeout_seconds"),
    ("queue", "enable_pipeline_optimization", True, "round trip"),
    ("queue", "pipeline_batch_size", 100, "worker.claim_batch_size"),
    ("queue", "pipeline_timeout", 5.0, "redis.socket_timeout"),
    ("queue", "queue_cleanup_interval", 3600, "queue.result_ttl_seconds"),
    ("queue", "stats_aggregation_interval", 300, "OpenTelemetryMetrics"),
]


@pytest.mark.parametrize(("section", "key", "value", "advice"), REMOVED)
def test_removed_fields_warn_and_say_what_to_use(
    section: str, key: str, value: object, advice: str
) -> None:
    with pytest.warns(DeprecationWarning, match="was removed") as caught:
        config = FairQueueConfig.from_dict({section: {key: value}}, env=NO_ENV)
    assert config == FairQueueConfig()
    (warning,) = caught
    assert str(warning.message).startswith(f"{section}.{key} ")
    assert advice in str(warning.message)
    assert warning.filename == __file__
    cls = {"redis": RedisConfig, "queue": QueueConfig}[section]
    assert key not in {f.name for f in attrs.fields(cls)}
    assert key not in FairQueueConfig().to_dict()[section]


def test_removed_fields_from_the_environment_warn_too() -> None:
    env = {"FAIRQUE_QUEUE__DEFAULT_MAX_RETRIES": "5", "FAIRQUE_QUEUE__LEASE_SECONDS": "9"}
    with pytest.warns(DeprecationWarning, match="FAIRQUE_QUEUE__DEFAULT_MAX_RETRIES") as caught:
        config = FairQueueConfig.from_dict({}, env=env)
    assert config.queue.lease_seconds == 9.0
    assert len(caught) == 1
    assert caught[0].filename == __file__


def test_removed_fields_are_not_accepted_in_code() -> None:
    with pytest.raises(TypeError):
        QueueConfig(default_max_retries=5)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        RedisConfig(decode_responses=False)  # type: ignore[call-arg]


def test_a_removed_field_next_to_a_bad_value_still_fails_on_the_bad_value() -> None:
    with pytest.warns(DeprecationWarning, match="stats_prefix"):
        error = _error({"queue": {"stats_prefix": "fq", "lease_seconds": 0}})
    assert error.path == "queue.lease_seconds"


def test_loading_functions_work_without_the_classmethods(tmp_path: Path) -> None:
    config = config_loading.config_from_dict(
        {"queue": {"name": "q1"}}, env=NO_ENV, cls=FairQueueConfig
    )
    assert config.queue.name == "q1"
    path = tmp_path / "c.yaml"
    config_loading.config_to_yaml(config, path)
    assert config_loading.config_from_yaml(path, env=NO_ENV, cls=FairQueueConfig) == config
    assert config_loading.config_to_dict(config) == config.to_dict()


def test_empty_inputs_give_defaults(tmp_path: Path) -> None:
    assert FairQueueConfig.from_dict({}, env=NO_ENV) == FairQueueConfig()
    assert FairQueueConfig.from_dict(None, env=NO_ENV) == FairQueueConfig()
    assert FairQueueConfig.from_dict({"worker": None}, env=NO_ENV) == FairQueueConfig()
    empty = tmp_path / "empty.yaml"
    empty.write_text("", encoding="utf-8")
    assert FairQueueConfig.from_yaml(empty, env=NO_ENV) == FairQueueConfig()


def test_ints_are_accepted_where_floats_are_expected() -> None:
    config = FairQueueConfig.from_dict({"queue": {"lease_seconds": 10}}, env=NO_ENV)
    assert config.queue.lease_seconds == 10.0
    assert isinstance(config.queue.lease_seconds, float)


def test_round_trip_through_yaml(tmp_path: Path) -> None:
    original = FairQueueConfig(
        redis=RedisConfig(url="redis://u:pw@h:6380/2", password="pw", cluster=True),
        worker=WorkerConfig(
            id="w-9",
            assigned_tenants=["a"],
            steal_targets=["b", "c"],
            heartbeat_interval_seconds=2.5,
        ),
        queue=QueueConfig(
            name="emails",
            lease_seconds=12.0,
            tenant_weights={"a": 2.0},
            tiers={"free": TierConfig(weight=1.0), "pro": TierConfig(weight=4.0, rank=1)},
            tenant_tiers={"b": "pro"},
            strict_tiers=True,
            retry_jitter=0.2,
        ),
    )
    path = tmp_path / "out.yaml"
    original.to_yaml(path)
    assert FairQueueConfig.from_yaml(path, env=NO_ENV) == original
    assert FairQueueConfig.from_dict(original.to_dict(), env=NO_ENV) == original


def test_to_dict_is_plain_data() -> None:
    data = FairQueueConfig(queue=QueueConfig(tiers={"pro": TierConfig(weight=3.0)})).to_dict()
    assert set(data) == {"redis", "worker", "queue", "schedules"}
    assert data["schedules"] == []
    assert data["queue"]["tiers"] == {"pro": {"weight": 3.0, "rank": 0}}
    assert data["worker"]["assigned_tenants"] == []


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read"):
        FairQueueConfig.from_yaml(tmp_path / "nope.yaml", env=NO_ENV)
    bad = tmp_path / "bad.yaml"
    bad.write_text("redis: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="not valid YAML"):
        FairQueueConfig.from_yaml(bad, env=NO_ENV)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just a string\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="mapping of sections"):
        FairQueueConfig.from_yaml(scalar, env=NO_ENV)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"queue:\n  name: \xff\xfe\n")
    with pytest.raises(ConfigurationError, match="not UTF-8 text"):
        FairQueueConfig.from_yaml(binary, env=NO_ENV)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("lease_seconds", 1e16),
        ("lease_seconds", 1e-9),
        ("result_ttl_seconds", 1e16),
    ],
)
def test_spans_the_backends_cannot_keep_in_milliseconds_are_refused(
    field: str, value: float
) -> None:
    with pytest.raises(ConfigurationError) as info:
        QueueConfig(**{field: value})
    assert info.value.path == f"queue.{field}"


# ---------------------------------------------------------------------- env overrides


def test_env_overrides_file_values(seed_file: Path) -> None:
    env = {
        "FAIRQUE_REDIS__PORT": "6380",
        "FAIRQUE_WORKER__ASSIGNED_TENANTS": "a, b",
        "FAIRQUE_WORKER__STEAL_TARGETS": '["c", "d"]',
        "FAIRQUE_QUEUE__STRICT_TIERS": "true",
        "FAIRQUE_QUEUE__LEASE_SECONDS": "12.5",
        "FAIRQUE_QUEUE__TIERS": '{"pro": {"weight": 4, "rank": 2}}',
        "FAIRQUE_QUEUE__TENANT_TIERS": '{"a": "pro"}',
        "FAIRQUE_QUEUE__TENANT_WEIGHTS": '{"b": 0.5}',
        "FAIRQUE_REDIS__USERNAME": "null",
        "FAIRQUE_DISABLE_PLUGIN_AUTOLOAD": "1",  # no "__": not a config override
        "FAIRQUE_REDIS_URL": "redis://elsewhere",  # likewise
        "PATH": "/usr/bin",
    }
    # the seed's removed fields
    with pytest.warns(DeprecationWarning, match="was removed"):
        config = FairQueueConfig.from_yaml(seed_file, env=env)
    assert config.redis.port == 6380
    assert config.redis.username is None
    assert config.redis.url is None
    assert config.worker.assigned_tenants == ["a", "b"]
    assert config.worker.steal_targets == ["c", "d"]
    assert config.worker.id == "worker-001"  # untouched file value
    assert config.queue.strict_tiers is True
    assert config.queue.lease_seconds == 12.5
    assert config.queue.tiers == {"pro": TierConfig(weight=4.0, rank=2)}
    assert config.queue.tenant_weight_table() == {"a": (4.0, 2), "b": (0.5, 0)}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), ("1", True), ("YES", True), ("on", True), ("false", False), ("0", False)],
)
def test_env_booleans(raw: str, expected: bool) -> None:
    env = {"FAIRQUE_QUEUE__STRICT_TIERS": raw}
    assert FairQueueConfig.from_dict({}, env=env).queue.strict_tiers is expected


def test_env_is_case_insensitive_in_the_key() -> None:
    config = FairQueueConfig.from_dict({}, env={"FAIRQUE_worker__max_concurrent_tasks": "4"})
    assert config.worker.max_concurrent_tasks == 4


@pytest.mark.parametrize(
    ("name", "raw", "path"),
    [
        ("FAIRQUE_REDIS__PORT", "six", "redis.port"),
        ("FAIRQUE_REDIS__PORT", "70000", "redis.port"),
        ("FAIRQUE_WORKER__MAX_CONCURRENT_TASKS", "0", "worker.max_concurrent_tasks"),
        ("FAIRQUE_WORKER__POLL_INTERVAL_SECONDS", "soon", "worker.poll_interval_seconds"),
        ("FAIRQUE_QUEUE__STRICT_TIERS", "maybe", "queue.strict_tiers"),
        ("FAIRQUE_QUEUE__TENANT_WEIGHTS", "[1]", "queue.tenant_weights"),
        ("FAIRQUE_QUEUE__TENANT_WEIGHTS", "{oops", "queue.tenant_weights"),
        ("FAIRQUE_WORKER__ASSIGNED_TENANTS", "[oops", "worker.assigned_tenants"),
    ],
)
def test_bad_env_values_name_the_path_and_value(name: str, raw: str, path: str) -> None:
    error = _error({}, {name: raw})
    assert error.path == path
    assert path in str(error)
    assert raw in str(error)


def test_unknown_env_keys_and_sections() -> None:
    error = _error({}, {"FAIRQUE_WORKER__NOPE": "1"})
    assert error.path == "worker.nope"
    assert "FAIRQUE_WORKER__NOPE" in str(error)
    error = _error({}, {"FAIRQUE_DATABASE__HOST": "x"})
    assert error.path == "database"
    assert "FAIRQUE_DATABASE__HOST" in str(error)


# ---------------------------------------------------------------------- errors name path and value


@pytest.mark.parametrize(
    ("data", "path", "value"),
    [
        ({"worker": {"max_concurrent_tasks": 0}}, "worker.max_concurrent_tasks", 0),
        ({"worker": {"max_concurrent_tasks": "10"}}, "worker.max_concurrent_tasks", "10"),
        ({"worker": {"max_concurrent_tasks": 2.5}}, "worker.max_concurrent_tasks", 2.5),
        ({"worker": {"id": ""}}, "worker.id", ""),
        ({"worker": {"id": "has space"}}, "worker.id", "has space"),
        ({"worker": {"poll_interval_seconds": 0}}, "worker.poll_interval_seconds", 0.0),
        ({"worker": {"task_timeout_seconds": -1}}, "worker.task_timeout_seconds", -1.0),
        ({"worker": {"assigned_tenants": ["ok", "b{x}"]}}, "worker.assigned_tenants.1", "b{x}"),
        ({"worker": {"assigned_tenants": "abc"}}, "worker.assigned_tenants", "abc"),
        ({"redis": {"port": True}}, "redis.port", True),
        ({"redis": {"port": 0}}, "redis.port", 0),
        ({"redis": {"db": -1}}, "redis.db", -1),
        ({"queue": {"name": "a:b"}}, "queue.name", "a:b"),
        ({"queue": {"lease_seconds": 0}}, "queue.lease_seconds", 0.0),
        ({"queue": {"lease_seconds": float("inf")}}, "queue.lease_seconds", float("inf")),
        ({"queue": {"strict_tiers": "yes"}}, "queue.strict_tiers", "yes"),
        ({"queue": {"retry_jitter": 1.0}}, "queue.retry_jitter", 1.0),
        ({"queue": {"retry_factor": 0.5}}, "queue.retry_factor", 0.5),
        ({"queue": {"retry_cap_seconds": 0.5}}, "queue.retry_cap_seconds", 0.5),
        ({"queue": {"tenant_weights": {"a": 0}}}, "queue.tenant_weights.a", 0.0),
        ({"queue": {"tenant_weights": {"a": "x"}}}, "queue.tenant_weights.a", "x"),
        ({"queue": {"tenant_weights": {"a b": 1}}}, "queue.tenant_weights.a b", "a b"),
        ({"queue": {"tiers": {"pro": {"weight": -1}}}}, "queue.tiers.pro.weight", -1.0),
        ({"queue": {"tiers": {"pro": {"rank": 5000}}}}, "queue.tiers.pro.rank", 5000),
        ({"queue": {"tenant_tiers": {"a": "gold"}}}, "queue.tenant_tiers.a", "gold"),
        ({"queue": []}, "queue", []),
    ],
)
def test_errors_name_the_path_and_value(data: dict[str, Any], path: str, value: object) -> None:
    error = _error(data)
    assert error.path == path
    assert error.value == value
    assert path in str(error)
    assert repr(value) in str(error)


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"worker": {"max_concurrency": 3}}, "worker.max_concurrency"),
        ({"celery": {}}, "celery"),
        ({"queue": {"tiers": {"pro": {"wieght": 2}}}}, "queue.tiers.pro.wieght"),
    ],
)
def test_unknown_keys_are_named(data: dict[str, Any], path: str) -> None:
    error = _error(data)
    assert error.path == path
    assert str(error) == f"unknown key {path}"


def test_affinity_lists_must_not_overlap() -> None:
    error = _error({"worker": {"assigned_tenants": ["a", "b"], "steal_targets": ["b", "c"]}})
    assert error.path == "worker.steal_targets"
    assert error.value == ["b"]
    with pytest.raises(ConfigurationError):
        WorkerConfig(assigned_tenants=["x"], steal_targets=["x"])


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(ConfigurationError) as info:
        WorkerConfig(max_concurrent_tasks=0)
    assert info.value.path == "worker.max_concurrent_tasks"
    with pytest.raises(ConfigurationError) as info:
        QueueConfig(name="bad name")
    assert info.value.path == "queue.name"
    with pytest.raises(ConfigurationError) as info:
        TierConfig(weight=0)
    assert info.value.path == "weight"
    config = QueueConfig()
    with pytest.raises(ConfigurationError):
        config.lease_seconds = -1  # validators also run on assignment


@pytest.mark.parametrize(
    ("section", "field"),
    [("queue", "lease_seconds"), ("queue", "result_ttl_seconds"), ("queue", "retry_base_seconds")],
)
def test_an_int_too_large_for_a_float_is_a_typed_error(section: str, field: str) -> None:
    # math.isfinite(10**400) raises OverflowError; hypothesis found it through QueueConfig
    with pytest.raises(ConfigurationError) as info:
        QueueConfig(**{field: 10**400})
    assert info.value.path == f"{section}.{field}"
    assert "must be a number" in str(info.value)


def test_configuration_error_is_a_value_error() -> None:
    assert isinstance(_error({"redis": {"port": 0}}), ValueError)


# ---------------------------------------------------------------------- secrets


def test_password_never_in_repr_or_str() -> None:
    secret = "hunter2-s3cret"
    config = FairQueueConfig(
        redis=RedisConfig(password=secret, url=f"redis://alice:{secret}@db.example:6379/0")
    )
    for text in (repr(config), str(config), repr(config.redis), str(config.redis)):
        assert secret not in text
    assert "redis://alice:***@db.example:6379/0" in repr(config.redis)


def test_url_without_password_is_shown_as_is() -> None:
    assert "redis://db.example:6379/1" in repr(RedisConfig(url="redis://db.example:6379/1"))
    assert "url=None" in repr(RedisConfig())


def test_password_not_echoed_in_errors() -> None:
    error = _error({"redis": {"password": 123456789}})
    assert error.path == "redis.password"
    assert "123456789" not in str(error)
    assert error.value == "***"
    error = _error({"redis": {"url": 42}, "worker": {}}, {"FAIRQUE_REDIS__PASSWORD": "null"})
    assert error.path == "redis.url"


# ---------------------------------------------------------------------- tenant weight table


def test_tenant_weight_table_combines_weights_and_tiers() -> None:
    queue = QueueConfig(
        tenant_weights={"alice": 3.0, "carol": 0.5},
        tiers={"free": TierConfig(weight=1.0, rank=0), "pro": TierConfig(weight=5.0, rank=2)},
        tenant_tiers={"bob": "pro", "carol": "pro", "dave": "free"},
    )
    assert queue.tenant_weight_table() == {
        "alice": (3.0, 0),  # explicit weight, no tier
        "bob": (5.0, 2),  # the tier's weight and rank
        "carol": (0.5, 2),  # explicit weight wins, the tier's rank stays
        "dave": (1.0, 0),
    }
    assert QueueConfig().tenant_weight_table() == {}


def test_configs_are_attrs_classes_with_the_api_fields() -> None:
    names = {f.name for f in attrs.fields(WorkerConfig)}
    assert {
        "id",
        "assigned_tenants",
        "steal_targets",
        "poll_interval_seconds",
        "task_timeout_seconds",
        "max_concurrent_tasks",
        "graceful_shutdown_timeout",
    } <= names
    queue_names = {f.name for f in attrs.fields(QueueConfig)}
    assert {"lease_seconds", "aging_horizon_seconds", "max_payload_bytes", "strict_tiers"} <= (
        queue_names
    )


def test_the_verbatim_seed_file_names_its_removed_assigned_users(tmp_path: Path) -> None:
    path = tmp_path / "seed.yaml"
    path.write_text(SEED_YAML, encoding="utf-8")
    with (
        pytest.warns(DeprecationWarning, match="was removed"),  # its no-effect fields first
        pytest.raises(ConfigurationError, match="assigned_users") as info,
    ):
        FairQueueConfig.from_yaml(path, env=NO_ENV)
    assert info.value.path == "worker.assigned_users"
    with pytest.raises(TypeError, match="assigned_users"):
        WorkerConfig(assigned_users=["a"])  # type: ignore[call-arg]
