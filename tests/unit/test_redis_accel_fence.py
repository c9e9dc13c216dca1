"""The Redis adapter's accelerators and their off switches (ADR 65): the claim's view of the
active set (``claim_view``: ``lua/_include/fast/`` beside the plain include), the function
library (``functions``) and the intake client (``intake``). Their equivalence with the
reference runs on real servers: the contract suite's ``valkey-ref`` param and the
differential test's (every accelerator off), and ``FAIRQUE_ACCEL_OFF=claim_view`` over the
claim's contract modules."""

from __future__ import annotations

import re

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from fairque_core import Message, QueueConfig
from fairque_core.settings.accel import Accelerators
from fairque_redis.accel import intake as fast_intake
from fairque_redis.accel.compose import backend_plugs
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.backends.backend_async import AsyncRedisBackend
from fairque_redis.keys import KeySpace
from fairque_redis.scripting import calls
from fairque_redis.scripting.calls import intake as ref_intake
from fairque_redis.scripting.function_library import LIBRARY, library_for
from fairque_redis.scripting.scripts import (
    ALL_FAST,
    FAST_INCLUDES,
    SOURCES,
    fast_includes,
    load_source,
    sources_for,
)

_DEFINED = re.compile(r"^local function ([A-Za-z_]\w*)", re.M)


def test_every_fast_include_has_a_plain_reference_that_defines_the_same_functions() -> None:
    for names in FAST_INCLUDES.values():
        for name in names:
            fast = set(_DEFINED.findall(load_source(f"_include/fast/{name}")))
            plain = set(_DEFINED.findall(load_source(f"_include/{name}")))
            # the reference defines what the scripts call; the fast one may add its helpers
            assert plain <= fast, f"{name}: the plain include defines {plain - fast} only"


def test_the_switch_picks_the_include_the_claim_is_built_with() -> None:
    assert fast_includes(Accelerators()) == ALL_FAST
    assert fast_includes(Accelerators(off={"claim_view"})) == frozenset()
    plain, fast = sources_for(frozenset()), sources_for(ALL_FAST)
    assert fast is SOURCES
    for script in ("claim", "finish_claim"):
        assert "local function fq_av_open" in fast[script]
        assert "local function fq_av_open" not in plain[script]
        assert "include _include/fast/claim_view" in fast[script]
    # scripts that do not claim are the same either way
    assert plain["push"] == fast["push"]
    assert library_for(frozenset()).name != LIBRARY.name
    assert library_for(ALL_FAST) is LIBRARY


@pytest.mark.parametrize("cls", [RedisBackend, AsyncRedisBackend])
@pytest.mark.parametrize(
    "off", [frozenset(), frozenset({"functions"}), frozenset({"claim_view"}), None]
)
def test_a_backend_reads_its_switches_when_it_is_built(
    cls: type, off: frozenset[str] | None
) -> None:
    accel = Accelerators.none() if off is None else Accelerators(off=off)
    client = redis.asyncio.Redis() if cls is AsyncRedisBackend else redis.Redis()
    backend = cls(client, queue="q", accel=accel)
    assert backend.script_mode == ("functions" if accel.on("functions") else "eval")
    claim = backend._scripts["claim"]
    assert ("local function fq_av_open" in claim.script) == accel.on("claim_view")
    if accel.on("functions"):
        assert claim.function in library_for(fast_includes(accel)).functions.values()
    else:
        assert claim.function is None


def test_the_environment_is_read_when_no_switches_are_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAIRQUE_ACCEL_OFF", "functions,claim_view")
    backend = RedisBackend(redis.Redis(), queue="q")
    assert backend.script_mode == "eval"
    assert "local function fq_av_open" not in backend._scripts["claim"].script
    assert backend_plugs(None) == (
        Accelerators(off={"functions", "claim_view"}),
        fast_intake.encode_entries,
    )
    monkeypatch.setenv("FAIRQUE_ACCEL_OFF", "intake")
    assert backend_plugs(None)[1] is None


_ids = st.text(alphabet="abcXYZ019_-.:", min_size=1, max_size=12)


@settings(max_examples=200)
@given(
    task_id=_ids,
    tenant=_ids,
    body=st.binary(max_size=64),
    priority=st.integers(1, 6),
    delay=st.sampled_from([0, 0.0, 1.5]),
    name=st.sampled_from(["", "job"]),
)
def test_the_intake_client_writes_the_reference_entries(
    task_id: str, tenant: str, body: bytes, priority: int, delay: float, name: str
) -> None:
    """The intake client's one-step encoder (the accelerator ``intake``) gives the bytes and
    the errors of the reference encoder (scripting/calls/intake.py)."""
    planner = calls.ScriptCalls(KeySpace("q"), QueueConfig(), None, lambda: "tok")
    message = Message(
        task_id=task_id, tenant=tenant, body=body, priority=priority, delay=delay, name=name
    )

    def outcome(encode: ref_intake.EntryEncoder) -> object:
        try:
            return encode(planner, [message, message])
        except Exception as exc:  # the same type and text from both
            return (type(exc), str(exc))

    assert outcome(fast_intake.encode_entries) == outcome(ref_intake.encode_entries)
