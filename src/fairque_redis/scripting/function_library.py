"""fairque's scripts as one Redis Functions library (ADR 41), built from the same Lua sources.

An ``EVALSHA`` runs the whole flattened script on every call, so each call re-creates every
``local function`` its includes define (ADR 12, 39: ~20% of a one-message push's server
instructions). A function library runs its top level once, at ``FUNCTION LOAD``: here the
include helpers are defined there, once for all scripts, and each script's body becomes the
callback of one ``redis.register_function`` (its ``KEYS`` and ``ARGV`` are the callback's
arguments, so the body's text is the one ``EVALSHA`` runs, unchanged).

- The helpers are the union of what the scripts use, shaken and ordered by the same resolver
  (:func:`fairque_redis.scripting.scripts.resolve`) that flattens each script: a synthetic unit that
  includes every script's includes and carries every body (only to drive the shaking).
- Each body is the text after the ``-- ---- script <name> ----`` mark of the script's
  flattened source (:data:`fairque_redis.scripting.scripts.SOURCES`), so a script registered there
  is in
  the library with no further step. Its flags come from its ``#!lua flags=...`` line.
- The library is named after a hash of its code (``fairque_<12 hex>``) and so are its
  functions (``fq_<12 hex>_<script>``: function names are global across libraries), so two
  fairque versions on one server load two libraries and never call each other's code.

Lua 5.1 limits that apply only here: the library's top level holds every helper as a local
(at most 200), and a callback reaches the helpers it uses as upvalues (at most 60). The
helpers and constants are ~100 locals; :data:`MAX_UPVALUES` is checked when the library is
built (an error names the script), so a script that grows past it fails the unit tests.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Collection, Mapping

import attrs

from fairque_redis.scripting.scripts import (
    _INCLUDE_RE,
    ALL_FAST,
    SCRIPTS,
    SOURCES,
    load_source,
    resolve,
    sources_for,
)

__all__ = ["LIBRARY", "FunctionLibrary", "build_library", "library_for", "script_flags"]

#: Lua 5.1's limit of upvalues per closure (LUAI_MAXUPVALUES).
MAX_UPVALUES = 60
#: Lua 5.1's limit of locals per function (LUAI_MAXVARS).
MAX_LOCALS = 200

_UNIT = "__fairque_library__"
_DEFINE_RE = re.compile(r"^local (?:function )?([A-Za-z_]\w*)", re.M)
_WORD_RE = re.compile(r"[A-Za-z_]\w*")
_FLAG_RE = re.compile(r"^#!lua(?:\s+flags=(\S*))?\s*$")
# a top-level constant whose value needs a Lua global: Redis 7.0 runs a library's top level
# with no globals but ``redis`` (``string.byte`` there fails the load), so such a constant is
# declared at the top and computed by the first call (``fq_lib_init``)
_CONSTANT_RE = re.compile(r"^local ([A-Za-z_]\w*) = (.*)$")
_STRING_RE = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_GLOBALS_RE = re.compile(
    r"\b(?:string|math|table|tonumber|tostring|type|pairs|ipairs|select|unpack|error|pcall|"
    r"next|cjson|bit|struct|cmsgpack|redis|setmetatable|getmetatable|rawget|rawset|assert)\b"
)
_INIT = "fq_lib_init"
_READY = "fq_lib_ready"


class LibraryLimitError(ValueError):
    """The library would break a Lua 5.1 limit (too many helper locals, or a callback needing
    more upvalues than Lua allows)."""


@attrs.frozen
class FunctionLibrary:
    """The library's code and how each script is called in it.

    ``functions`` maps a script name to its function name; ``by_source`` maps a script's
    flattened source (what a ``Script`` object holds) to the same function name.
    """

    name: str
    code: str
    functions: Mapping[str, str]
    by_source: Mapping[str, str]


def script_flags(source: str) -> tuple[str, ...]:
    """The flags of a flattened script's ``#!lua flags=a,b`` line (none without a shebang)."""
    first = source.split("\n", 1)[0]
    match = _FLAG_RE.match(first)
    if match is None or not match.group(1):
        return ()
    return tuple(flag for flag in match.group(1).split(",") if flag)


def _body(name: str, source: str) -> str:
    mark = f"-- ---- script {name} ----\n"
    _, found, body = source.partition(mark)
    if not found:
        raise ValueError(f"the flattened script {name!r} has no script mark")
    return body


def _helpers(
    names: list[str],
    sources: Mapping[str, str],
    loader: Callable[[str], str],
    fast: Collection[str],
) -> str:
    """Every include definition some script uses, once, in dependency order."""
    includes: list[str] = []
    for name in names:
        for line in loader(name).splitlines():
            if _INCLUDE_RE.match(line) and line not in includes:
                includes.append(line)
    bodies = [_body(name, sources[name]) for name in names]
    unit = "\n".join([*includes, *bodies])

    def load(which: str) -> str:
        return unit if which == _UNIT else loader(which)

    flat = resolve(_UNIT, load, fast=fast)
    head, _, _ = flat.partition(f"-- ---- script {_UNIT} ----\n")
    return head


def _deferred(helpers: str) -> tuple[str, list[str]]:
    """``helpers`` with every constant that needs a global at load turned into a bare
    declaration, and the assignments that compute them (in order) for ``fq_lib_init``."""
    out: list[str] = []
    init: list[str] = []
    for line in helpers.split("\n"):
        match = _CONSTANT_RE.match(line)
        if match is not None and _GLOBALS_RE.search(_STRING_RE.sub("''", match.group(2))):
            out.append(f"local {match.group(1)}")
            init.append(f"  {match.group(1)} = {match.group(2)}")
        else:
            out.append(line)
    return "\n".join(out), init


def _check_limits(helpers: str, bodies: Mapping[str, str]) -> None:
    defined = set(_DEFINE_RE.findall(helpers))
    if len(defined) > MAX_LOCALS - 10:
        raise LibraryLimitError(f"the library defines {len(defined)} helpers at its top level")
    for name, body in bodies.items():
        # an over-count (a body's own local of a helper's name counts too) errs on the safe side
        used = defined.intersection(_WORD_RE.findall(body))
        if len(used) > MAX_UPVALUES - 2:
            raise LibraryLimitError(
                f"script {name!r} uses {len(used)} helpers: a function callback reaches at "
                f"most {MAX_UPVALUES} upvalues (group the helpers in a table)"
            )


def build_library(
    sources: Mapping[str, str] = SOURCES,
    loader: Callable[[str], str] = load_source,
    *,
    fast: Collection[str] = ALL_FAST,
) -> FunctionLibrary:
    """The library of the scripts ``sources`` (name -> flattened source, built with the
    includes ``fast`` in their fast version: the library's helpers are built so too)."""
    names = list(sources)
    helpers = _helpers(names, sources, loader, fast)
    bodies = {name: _body(name, sources[name]) for name in names}
    _check_limits(helpers, bodies)
    digest = hashlib.sha1(usedforsecurity=False)
    digest.update(helpers.encode())
    for name in names:
        digest.update(f"\0{name}\0{','.join(script_flags(sources[name]))}\0".encode())
        digest.update(bodies[name].encode())
    tag = digest.hexdigest()[:12]
    functions = {name: f"fq_{tag}_{name}" for name in names}
    helpers, init = _deferred(helpers)
    parts = [f"#!lua name=fairque_{tag}", helpers]
    prelude = ""
    if init:
        parts.append(
            f"local {_READY} = false\nlocal function {_INIT}()\n"
            + "\n".join(init)
            + f"\n  {_READY} = true\nend\n"
        )
        prelude = f"if not {_READY} then {_INIT}() end\n"
    for name in names:
        flags = ", ".join(f"'{flag}'" for flag in script_flags(sources[name]))
        parts.append(
            f"-- ---- function {name} ----\n"
            f"redis.register_function{{function_name = '{functions[name]}', "
            f"flags = {{{flags}}}, callback = function(KEYS, ARGV)\n"
            f"{prelude}{bodies[name]}end}}\n"
        )
    return FunctionLibrary(
        name=f"fairque_{tag}",
        code="\n".join(parts),
        functions=functions,
        by_source={sources[name]: functions[name] for name in names},
    )


@functools.cache
def library_for(fast: frozenset[str] = ALL_FAST) -> FunctionLibrary:
    """The library of every registered script built with the includes ``fast`` in their fast
    version (:func:`~fairque_redis.scripting.scripts.sources_for`); one per set, made on first
    use. Each is named after its code, so libraries of two sets live side by side on a
    server."""
    sources = sources_for(fast)
    return build_library({name: sources[name] for name in SCRIPTS}, fast=fast)


#: The library of every registered script (:data:`fairque_redis.scripting.scripts.SCRIPTS`),
#: accelerators on.
LIBRARY: FunctionLibrary = library_for(ALL_FAST)
