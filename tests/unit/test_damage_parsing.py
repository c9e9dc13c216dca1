"""The client side of issue 34 item 3: a damaged DLQ score is read, not raised; a damage detail
whose found value holds spaces is parsed whole; a WRONGTYPE met by a writing script is
reported as possibly partial."""

from __future__ import annotations

import pytest

from fairque_core import DamagedKeyError
from fairque_redis.scripting.calls.dlq import _moved_ms
from fairque_redis.scripting.scripts import translate_script_error


@pytest.mark.parametrize(
    ("raw", "moved", "damaged"),
    [
        (b"1796187785044", 1796187785044.0, False),
        (b"-5", -5.0, False),
        (b"1.5", 1.5, True),
        (b"inf", 0.0, True),
        (b"-inf", 0.0, True),
        (b"nan", 0.0, True),
        (b"junk", 0.0, True),
    ],
)
def test_a_dlq_score_is_read_as_far_as_it_can_be(raw: bytes, moved: float, damaged: bool) -> None:
    value, note = _moved_ms(raw)
    assert value == moved
    assert bool(note) is damaged
    if damaged:
        assert "fairque doctor --repair" in note


def test_a_tab_separated_damage_detail_keeps_its_spaces() -> None:
    err = translate_script_error(
        "push",
        'FQ_E_DAMAGED fq:{q}:meta\thash whose ready is "lots" (not a number)\thash whose ready '
        "is an integer script: fq_push, on @user_function:12.",
    )
    assert isinstance(err, DamagedKeyError)
    assert err.key == "fq:{q}:meta"
    assert err.found == 'hash whose ready is "lots" (not a number)'
    assert err.expected == "hash whose ready is an integer"
    assert not err.partial
    assert "the call changed nothing" in str(err)


def test_a_space_separated_detail_is_read_as_before() -> None:
    err = translate_script_error("claim", "FQ_E_DAMAGED fq:{q}:leases string zset")
    assert isinstance(err, DamagedKeyError)
    assert (err.key, err.found, err.expected) == ("fq:{q}:leases", "string", "zset")


@pytest.mark.parametrize(("script", "partial"), [("push", True), ("stats", False)])
def test_a_wrongtype_is_partial_only_in_a_script_that_writes(script: str, partial: bool) -> None:
    err = translate_script_error(script, "WRONGTYPE Operation against a key holding the wrong kind")
    assert isinstance(err, DamagedKeyError)
    assert err.partial is partial
    assert ("may have applied in part" in str(err)) is partial
