"""The accelerators' off switches (ADR 65): parsed from the environment, unknown names refused."""

from __future__ import annotations

import pytest

from fairque_core.domain.errors import ConfigurationError
from fairque_core.settings.accel import ENV_VAR, NAMES, Accelerators


def test_nothing_is_off_by_default() -> None:
    switches = Accelerators.from_env({})
    assert all(switches.on(name) for name in NAMES)


def test_all_turns_every_accelerator_off() -> None:
    switches = Accelerators.from_env({ENV_VAR: "all"})
    assert not any(switches.on(name) for name in NAMES)
    assert switches == Accelerators.none()


def test_a_list_turns_those_off_only() -> None:
    first, *rest = sorted(NAMES)
    switches = Accelerators.from_env({ENV_VAR: f" {first} ,"})
    assert not switches.on(first)
    assert all(switches.on(name) for name in rest)


def test_an_unknown_name_is_a_configuration_error_naming_it() -> None:
    with pytest.raises(ConfigurationError, match="no_such_thing") as info:
        Accelerators.from_env({ENV_VAR: "no_such_thing"})
    assert info.value.path == ENV_VAR


def test_asking_for_an_unlisted_accelerator_is_a_bug() -> None:
    with pytest.raises(KeyError):
        Accelerators().on("no_such_thing")
