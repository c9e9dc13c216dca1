"""The function library (ADR 41) built from the Lua sources: one function per registered
script with the script's flags, the helpers once at the top, names carrying a hash of the code,
and the Lua 5.1 limits checked when it is built. That the library loads and each function
behaves as its EVALSHA twin is proven on real servers (tests/integration/test_function_scripts.py
and the contract suite, which runs through functions by default)."""

from __future__ import annotations

import re

import pytest

from fairque_redis.scripting.function_library import (
    LIBRARY,
    LibraryLimitError,
    build_library,
    script_flags,
)
from fairque_redis.scripting.scripts import SCRIPTS, SOURCES, resolve


def test_every_registered_script_is_one_function_named_with_the_library_hash() -> None:
    tag = LIBRARY.name.removeprefix("fairque_")
    assert re.fullmatch(r"[0-9a-f]{12}", tag)
    assert LIBRARY.code.startswith(f"#!lua name={LIBRARY.name}\n")
    assert set(LIBRARY.functions) == set(SCRIPTS)
    for name, function in LIBRARY.functions.items():
        assert function == f"fq_{tag}_{name}"
        assert LIBRARY.code.count(f"function_name = '{function}'") == 1
        assert LIBRARY.by_source[SOURCES[name]] == function


def test_each_function_carries_its_scripts_flags() -> None:
    for name, spec in SCRIPTS.items():
        flags = script_flags(SOURCES[name])
        assert f"#!lua{' flags=' + ','.join(flags) if flags else ''}" == spec.shebang
        wanted = ", ".join(f"'{f}'" for f in flags)
        assert f"function_name = '{LIBRARY.functions[name]}', flags = {{{wanted}}}," in (
            LIBRARY.code
        )
    assert script_flags("#!lua flags=no-writes,allow-oom\nx") == ("no-writes", "allow-oom")
    assert script_flags("return 1\n") == ()


def test_helpers_are_defined_once_and_bodies_are_the_eval_text() -> None:
    helpers = LIBRARY.code.split("-- ---- function ", 1)[0]
    defined = re.findall(r"^local (?:function )?([A-Za-z_]\w*)", helpers, re.M)
    assert len(defined) == len(set(defined))  # once each
    assert "fq_open" in defined
    for name in SCRIPTS:
        body = SOURCES[name].split(f"-- ---- script {name} ----\n", 1)[1]
        assert body in LIBRARY.code  # the very text EVALSHA runs
        # no helper is defined inside a callback: they were made at load
        assert not re.search(r"^local function fq_", body, re.M)


def test_a_constant_needing_a_global_is_computed_by_the_first_call() -> None:
    # Redis 7.0 runs a library's top level without `string`: tenant.lua's string.byte constant
    assert "local FQ_MEMBER_SEP_BYTE\n" in LIBRARY.code
    assert "  FQ_MEMBER_SEP_BYTE = string.byte(FQ_MEMBER_SEP)" in LIBRARY.code
    assert LIBRARY.code.count("if not fq_lib_ready then fq_lib_init() end") == len(SCRIPTS)


def _loader(files: dict[str, str]):  # type: ignore[no-untyped-def]
    return lambda name: files[name]


def test_another_build_has_another_name_and_function_names() -> None:
    files = {
        "one": '#!lua flags=no-writes\n--- @include "h"\nreturn fq_h(1)\n',
        "_include/h": "local function fq_h(x)\n  return x\nend\n",
    }
    first = build_library({"one": resolve("one", _loader(files))}, _loader(files))
    files["_include/h"] = "local function fq_h(x)\n  return x + 1\nend\n"
    second = build_library({"one": resolve("one", _loader(files))}, _loader(files))
    assert first.name != second.name
    assert first.functions["one"] != second.functions["one"]
    assert "flags = {'no-writes'}" in first.code


def test_a_script_reaching_more_helpers_than_lua_upvalues_is_refused() -> None:
    names = [f"fq_h{k}" for k in range(70)]
    files = {
        "_include/h": "".join(f"local function {n}()\n  return 1\nend\n" for n in names),
        "big": '#!lua\n--- @include "h"\nreturn ' + " + ".join(f"{n}()" for n in names) + "\n",
    }
    with pytest.raises(LibraryLimitError, match="'big' uses 70 helpers"):
        build_library({"big": resolve("big", _loader(files))}, _loader(files))
