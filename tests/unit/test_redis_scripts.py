"""The Lua scripts as artefacts: includes, declared KEYS, static text, error table, NOSCRIPT."""

from __future__ import annotations

import asyncio
import re
from importlib import resources
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairque_core import (
    LeaseLostError,
    LuaScriptError,
    Message,
    PayloadTooLargeError,
    Priority,
    QueueConfig,
    ScriptContractError,
    TaskValidationError,
)
from fairque_core.domain.scoring import STRIDE_SCALE, seq_member, static_score, stride_for
from fairque_redis.keys import KeySpace
from fairque_redis.scripting.scripts import (
    ANCHOR_KEYS,
    SCRIPTS,
    SOURCES,
    IncludeCycleError,
    load_source,
    resolve,
    translate_script_error,
)

LUA_DIR = resources.files("fairque_redis").joinpath("lua")
OPERATION_FILES = sorted(
    p.name[:-4] for p in LUA_DIR.iterdir() if p.name.endswith(".lua") and p.is_file()
)
INCLUDE_FILES = sorted(
    p.name[:-4] for p in LUA_DIR.joinpath("_include").iterdir() if p.name.endswith(".lua")
)


def _loader(files: dict[str, str]) -> Any:
    return lambda name: files[name]


# ---- the include resolver ---------------------------------------------------------------------


def test_resolver_inlines_each_include_once_before_its_users() -> None:
    files = {
        "main": '#!lua\n--- @include "b"\n--- @include "a"\nreturn b()',
        "_include/a": "local function a() return 1 end",
        "_include/b": '--- @include "a"\nlocal function b() return a() end',
    }
    for shake in (True, False):
        text = resolve("main", _loader(files), shake=shake)
        lines = text.splitlines()
        assert lines[0] == "#!lua"
        assert text.count("local function a()") == 1
        assert text.index("local function a()") < text.index("local function b()")
        assert text.index("local function b()") < text.index("return b()")
        assert "@include" not in text


def test_resolver_keeps_only_the_definitions_a_script_uses() -> None:
    files = {
        "main": '--- @include "b"\nreturn b()',
        "_include/a": (
            "--[[ a: docblock naming unused() ]]\n"
            "local K = 3\n"
            "-- used through b\n"
            "local function a()\n  return K\nend\n"
            "local function unused()\n  return 0\nend"
        ),
        "_include/b": '--- @include "a"\nlocal function b() return a() end\nlocal function c() end',
    }
    text = resolve("main", _loader(files))
    assert "local K = 3" in text
    assert "-- used through b\nlocal function a()" in text
    assert "unused" not in text
    assert "local function c()" not in text
    assert "unused" in resolve("main", _loader(files), shake=False)


def test_the_shaker_keeps_a_helper_table_whole_and_what_its_fields_use() -> None:
    # helpers grouped in a table (one top-level local): a script using one field carries the
    # table, every field and what the fields use; a script not using the table carries none
    files = {
        "main": '--- @include "t"\nreturn T.one()',
        "other": '--- @include "t"\nreturn 1',
        "_include/t": (
            "local function base() return 1 end\n"
            "local function spare() return 2 end\n"
            "local T = {}\n"
            "-- the first field\n"
            "function T.one()\n  return T.two()\nend\n"
            "function T.two()\n  return base()\nend"
        ),
    }
    text = resolve("main", _loader(files))
    assert "local T = {}" in text
    assert "-- the first field\nfunction T.one()" in text
    assert "function T.two()\n  return base()\nend" in text
    assert "local function base()" in text
    assert "spare" not in text
    other = resolve("other", _loader(files))
    assert "T." not in other
    assert "base" not in other


def test_every_script_defines_what_it_uses() -> None:
    # the shaker must never drop a definition a script needs: every fq_ name a flattened script
    # mentions is defined in it (a global would be nil at run time)
    for name, source in SOURCES.items():
        used = set(re.findall(r"\b(fq_\w+|FQ_(?!E_)\w+)\b", source))
        defined = set(re.findall(r"^local (?:function )?(\w+)", source, re.M))
        assert used <= defined, f"{name}: {sorted(used - defined)}"


@pytest.mark.parametrize(
    "files",
    [
        {
            "main": '--- @include "a"',
            "_include/a": '--- @include "b"',
            "_include/b": '--- @include "a"',
        },
        {"main": '--- @include "a"', "_include/a": '--- @include "a"'},
    ],
)
def test_resolver_refuses_cycles(files: dict[str, str]) -> None:
    with pytest.raises(IncludeCycleError) as info:
        resolve("main", _loader(files))
    assert "_include/a" in info.value.chain


def test_every_lua_file_has_a_spec_and_every_spec_a_file() -> None:
    assert sorted(SCRIPTS) == OPERATION_FILES
    assert set(SOURCES) == set(SCRIPTS)


def _docblock(name: str) -> str:
    text = load_source(name)
    match = re.search(r"--\[\[(.*?)\]\]", text, re.S)
    assert match is not None, f"{name}.lua has no --[[ ]] docblock"
    return match.group(1)


@pytest.mark.parametrize("name", OPERATION_FILES)
def test_docblock_declares_the_spec_keys(name: str) -> None:
    doc = _docblock(name)
    declared = re.findall(r"KEYS\[(\d+)\]\s+(\w+)", doc)
    assert [int(i) for i, _ in declared] == list(range(1, len(declared) + 1))
    assert tuple(k for _, k in declared) == SCRIPTS[name].keys
    assert "ARGV" in doc
    assert "Returns:" in doc


@pytest.mark.parametrize("name", OPERATION_FILES)
def test_shebang_matches_the_write_flag(name: str) -> None:
    assert load_source(name).splitlines()[0] == SCRIPTS[name].shebang
    assert SCRIPTS["push"].shebang == "#!lua"  # refused up front at maxmemory


def test_anchor_keys_match_the_keyspace() -> None:
    keys = KeySpace("q1")
    assert keys.anchors() == [getattr(keys, name) for name in ANCHOR_KEYS]
    assert keys.meta.endswith(":meta")  # core.lua strips the 4-letter suffix for the prefix


@pytest.mark.parametrize("name", INCLUDE_FILES)
def test_includes_hold_only_local_definitions(name: str) -> None:
    text = load_source(f"_include/{name}")
    text = re.sub(r"--\[\[.*?\]\]", "", text, flags=re.S)
    allowed = re.compile(
        r"^(local function \w+\(|function [A-Z_]+\.\w+\(|local [A-Z_]+ = |end$|--|$)"
    )
    for line in text.splitlines():
        if line and not line[0].isspace():
            assert allowed.match(line), f"_include/{name}.lua: top-level {line!r}"


def test_key_families_are_spelled_once_in_lua() -> None:
    # keys.lua is the only Lua that spells a key family; everything else calls its builders
    family = re.compile(
        r"'(task|waits|children|c|n|tenant|ts|active):'|'(tenants|wake|sched|parked)'"
    )
    for name in OPERATION_FILES + [f"_include/{i}" for i in INCLUDE_FILES]:
        text = load_source(name)
        found = [m.group(0) for m in family.finditer(text)]
        if name == "_include/keys":
            assert len(found) == len(set(found)) == 12, found
        else:
            assert found == [], f"{name}.lua spells {found}"
            assert "q.prefix .." not in text, f"{name}.lua builds a key by hand"


def test_resolver_follows_includes_of_includes_with_shaking() -> None:
    files = {
        "main": '--- @include "outer"\nreturn outer()',
        "_include/outer": '--- @include "inner"\nlocal function outer() return inner_key(1) end',
        "_include/inner": (
            "local PREFIX = 'x:'\n"
            "local function inner_key(id)\n  return PREFIX .. id\nend\n"
            "local function inner_unused()\n  return 0\nend"
        ),
    }
    text = resolve("main", _loader(files))
    assert text.index("local PREFIX") < text.index("local function inner_key")
    assert text.index("local function inner_key") < text.index("local function outer")
    assert "inner_unused" not in text


def test_default_stride_in_lua_matches_scoring() -> None:
    assert "local FQ_DEFAULT_STRIDE = " + str(STRIDE_SCALE) in load_source("_include/tenant")
    assert stride_for(1.0) == STRIDE_SCALE


def test_script_text_is_static() -> None:
    # Two backends with different queues and configs load byte-identical scripts: nothing
    # about a queue, tenant or task is ever formatted into script text.
    import redis

    from fairque_redis.backends.backend import RedisBackend

    one = RedisBackend(redis.Redis(), queue="q1")
    two = RedisBackend(redis.Redis(), queue="q2", config=QueueConfig(strict_tiers=True))
    assert {n: s.sha for n, s in one._scripts.items()} == {
        n: s.sha for n, s in two._scripts.items()
    }
    for source in SOURCES.values():
        assert "q1" not in source
        assert "fq:{" not in source


# ---- the error table --------------------------------------------------------------------------


def test_error_codes_map_to_typed_errors() -> None:
    lost = translate_script_error("finish", "FQ_E_LEASE_LOST t-1")
    assert isinstance(lost, LeaseLostError)
    assert lost.task_id == "t-1"
    dep = translate_script_error("push", "FQ_E_UNKNOWN_DEP ghost")
    assert isinstance(dep, TaskValidationError)
    assert dep.value == "ghost"
    big = translate_script_error("push", "FQ_E_TOO_LARGE 2000 1024")
    assert isinstance(big, PayloadTooLargeError)
    assert (big.size, big.limit) == (2000, 1024)
    assert isinstance(translate_script_error("push", "FQ_E_BAD_ID task_id"), TaskValidationError)
    assert isinstance(translate_script_error("push", "FQ_E_NOPE x"), ScriptContractError)
    other = translate_script_error("push", "ERR something else")
    assert isinstance(other, LuaScriptError)
    assert not isinstance(other, ScriptContractError)


# ---- against a real server -----------------------------------------------------------------


def _eval_include(client: Any, body: str, *args: Any, numkeys: int = 0) -> Any:
    main = '--- @include "core"\n' + body
    text = resolve("main", lambda name: main if name == "main" else load_source(name))
    return client.eval(text, numkeys, *args)


@pytest.fixture(scope="module")
def raw_client(valkey_server: Any) -> Any:
    import redis

    client = redis.Redis.from_url(valkey_server.url)
    yield client
    client.close()


@pytest.mark.parametrize("partition", [None, 3])
def test_lua_key_builders_agree_with_the_keyspace(raw_client: Any, partition: int | None) -> None:
    keys = KeySpace("q-1.a", partition=partition)
    ident, tier = "id:with:colons/x", 7
    got = _eval_include(
        raw_client,
        "local q = {prefix = fq_prefix(KEYS[1])}\n"
        "local id, tier = ARGV[1], fq_int(tonumber(ARGV[2]))\n"
        "return {q.prefix, fq_task_key(q, id), fq_waits_key(q, id), fq_children_key(q, id),"
        " fq_critical_key(q, id), fq_normal_key(q, id), fq_tenant_key(q, id),"
        " fq_tenant_stats_key(q, id), fq_active_key(q, tier), fq_tenants_key(q),"
        " fq_wake_key(q), fq_sched_key(q)}",
        keys.meta,
        ident,
        tier,
        numkeys=1,
    )
    assert [g.decode() for g in got] == [
        keys.prefix,
        keys.task(ident),
        keys.waits(ident),
        keys.children(ident),
        keys.critical(ident),
        keys.normal(ident),
        keys.tenant(ident),
        keys.tenant_stats(ident),
        keys.active(tier),
        keys.tenants,
        keys.wake,
        keys.sched,
    ]


@pytest.mark.parametrize("partition", [None, 3])
def test_lua_parked_key_agrees_with_the_keyspace(raw_client: Any, partition: int | None) -> None:
    # flow control's parked set (ADR 28): one spelling in keys.lua, one in KeySpace
    keys = KeySpace("q-1.a", partition=partition)
    got = _eval_include(
        raw_client,
        '--- @include "limits"\nreturn fq_parked_key({prefix = fq_prefix(KEYS[1])})',
        keys.meta,
        numkeys=1,
    )
    assert got.decode() == keys.parked == keys.prefix + "parked"


@given(
    priority=st.integers(1, 5),
    ready_ms=st.integers(0, 2**48),
    horizon_ms=st.integers(0, 10**9),
    seq=st.integers(1, 10**15),
)
def test_lua_score_and_member_agree_with_scoring(
    raw_client: Any, priority: int, ready_ms: int, horizon_ms: int, seq: int
) -> None:
    got = _eval_include(
        raw_client,
        "return {fq_int(fq_score(tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]))),"
        " fq_member(tonumber(ARGV[4]), 'x:y')}",
        priority,
        ready_ms,
        horizon_ms,
        seq,
    )
    assert int(got[0]) == static_score(Priority(priority), ready_ms, horizon_ms)
    assert got[1].decode() == seq_member(seq, "x:y")


def test_script_errors_come_back_typed(raw_client: Any, valkey_server: Any) -> None:
    from fairque_redis.backends.backend import RedisBackend

    backend = RedisBackend.from_url(valkey_server.url, queue="errs")
    try:
        with pytest.raises(LeaseLostError):
            backend.finish("nope", "tok")
        # the script itself refuses what the client check would have caught
        call = backend._planner.push(
            [Message(task_id="big", tenant="u", priority=Priority.LOW, body=b"x" * 10)]
        )
        args = list(call.args)
        args[6] = "5"  # max payload bytes in the common header
        with pytest.raises(PayloadTooLargeError):
            backend._run(type(call)(call.script, args, call.parse))
        assert backend.get_state("big") is None
    finally:
        backend.close()
        raw_client.delete(*KeySpace("errs").anchors())


def test_sync_backend_survives_script_flush(raw_client: Any, valkey_server: Any) -> None:
    from fairque_redis.backends.backend import RedisBackend

    backend = RedisBackend.from_url(valkey_server.url, queue="flush-sync")
    try:
        msg = Message(task_id="t1", tenant="u", priority=Priority.NORMAL, body=b"{}")
        assert backend.push(msg) is True
        raw_client.script_flush()
        [claimed] = backend.claim()
        raw_client.script_flush()
        backend.finish("t1", claimed.lease.token, b"ok")
        raw_client.script_flush()
        assert backend.get_result("t1") == b"ok"
        assert backend.stats()["finished"] == 1
    finally:
        backend.close()
        _drop_queue(raw_client, "flush-sync")


def test_async_backend_survives_script_flush(raw_client: Any, valkey_server: Any) -> None:
    from fairque_redis.backends.backend_async import AsyncRedisBackend

    async def scenario() -> None:
        backend = AsyncRedisBackend.from_url(valkey_server.url, queue="flush-async")
        try:
            msg = Message(task_id="t1", tenant="u", priority=Priority.CRITICAL, body=b"{}")
            assert await backend.push(msg) is True
            assert await backend.push(msg) is False
            raw_client.script_flush()
            [claimed] = await backend.claim(worker_id="w")
            raw_client.script_flush()
            await backend.heartbeat("t1", claimed.lease.token)
            with pytest.raises(LeaseLostError):
                await backend.finish("t1", "stale")
            await backend.finish("t1", claimed.lease.token)
            stats = await backend.stats()
            assert (stats["pushed"], stats["duplicates"], stats["finished"]) == (1, 1, 1)
        finally:
            await backend.close()

    asyncio.run(scenario())
    _drop_queue(raw_client, "flush-async")


def _drop_queue(client: Any, queue: str) -> None:
    keys = list(client.scan_iter(match=KeySpace(queue).prefix.replace("{", "\\{") + "*"))
    if keys:
        client.delete(*keys)


_ID_CHARS = "ABCZabcz0129_.:@/+=#-"


@given(
    st.text(_ID_CHARS, min_size=1, max_size=12),
    st.integers(1, 10**15),
    st.integers(1, 10**15),
)
def test_lua_active_members_order_by_activation_and_decode(
    raw_client: Any, tenant: str, act: int, other: int
) -> None:
    # Equal passes tie on the member bytes: the member starts with the zero-padded activation
    # number, so byte order is activation order whatever the ids (ADR 4); a bare id (a member
    # written before activation order existed) decodes to itself.
    main = (
        '--- @include "tenant"\n'
        "local m = fq_active_member(ARGV[1], tonumber(ARGV[2]))\n"
        "local n = fq_active_member('~', tonumber(ARGV[3]))\n"
        "return {fq_member_tenant(m), fq_member_tenant(ARGV[1]), m, n}"
    )
    text = resolve("main", lambda name: main if name == "main" else load_source(name))
    got = raw_client.eval(text, 0, tenant, str(act), str(other))
    assert got[0] == tenant.encode()
    assert got[1] == tenant.encode()
    if act != other:
        assert (got[2] < got[3]) == (act < other)  # bytes order, as the sorted set compares
