"""``redis.scripts`` (ADR 41): how a deployment configured by file chooses between Redis
Functions and EVALSHA. Values, validation, the environment override and the round trip; that
the choice reaches the backend is tests/integration/test_script_mode_settings.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairque_core import ConfigurationError, FairQueueConfig, RedisConfig
from fairque_core.settings.config import SCRIPT_MODES

NO_ENV: dict[str, str] = {}


def test_the_default_is_functions() -> None:
    assert RedisConfig().scripts == "functions"
    assert FairQueueConfig.from_dict({}, env=NO_ENV).redis.scripts == "functions"
    assert SCRIPT_MODES == ("functions", "eval")


def test_a_file_chooses_eval(tmp_path: Path) -> None:
    path = tmp_path / "fairque.yaml"
    path.write_text("redis:\n  url: redis://localhost:6379/0\n  scripts: eval\n")
    config = FairQueueConfig.from_yaml(path, env=NO_ENV)
    assert config.redis.scripts == "eval"
    again = tmp_path / "again.yaml"
    config.to_yaml(again)
    assert FairQueueConfig.from_yaml(again, env=NO_ENV) == config
    assert config.to_dict()["redis"]["scripts"] == "eval"


@pytest.mark.parametrize("value", ["lua", "EVAL", "", "evalsha", 1, True, None])
def test_a_bad_value_is_a_typed_error_naming_the_field(value: object) -> None:
    with pytest.raises(ConfigurationError) as caught:
        FairQueueConfig.from_dict({"redis": {"scripts": value}}, env=NO_ENV)
    assert caught.value.path == "redis.scripts"
    assert caught.value.value == value
    with pytest.raises(ConfigurationError) as direct:
        RedisConfig(scripts=value)  # type: ignore[arg-type]
    assert direct.value.path == "redis.scripts"


def test_the_environment_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "fairque.yaml"
    path.write_text("redis:\n  scripts: functions\n")
    env = {"FAIRQUE_REDIS__SCRIPTS": "eval"}
    assert FairQueueConfig.from_yaml(path, env=env).redis.scripts == "eval"
    assert FairQueueConfig.from_dict({}, env=env).redis.scripts == "eval"


def test_a_bad_environment_value_is_a_typed_error() -> None:
    with pytest.raises(ConfigurationError) as caught:
        FairQueueConfig.from_dict({}, env={"FAIRQUE_REDIS__SCRIPTS": "fcall"})
    assert caught.value.path == "redis.scripts"
    assert "must be one of 'functions', 'eval'" in str(caught.value)
