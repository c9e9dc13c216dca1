"""The Lua scripts: include resolution, the registry of operations, and the error table.

Each operation is one file in ``lua/`` whose header docblock lists its KEYS, ARGV and return
value. Shared ``local function``s live in ``lua/_include/`` and are pulled in by lines of the
form ``--- @include "name"``; :func:`resolve` flattens a script once at import (each include
appears once, in dependency order; a cycle is an error) and keeps only the included
definitions the script uses, transitively. The flattened text is static module
data, never formatted with user data, and each is registered through redis-py ``Script``
objects, which send ``EVALSHA`` and reload the script on ``NOSCRIPT`` (after a restart, a
failover or ``SCRIPT FLUSH``).

Some includes have a second, faster version in ``lua/_include/fast/`` beside the plain one,
which is the reference (ADR 65): :data:`FAST_INCLUDES` names them by the accelerator whose off
switch (:mod:`fairque_core.settings.accel`) turns them off. :func:`resolve` takes the fast
version of the includes named in its ``fast`` argument (all of them by default);
:func:`sources_for` gives every script built so, once per set of fast includes, and a backend
picks its set when it is built (:func:`fast_includes` of its ``accel``).

Scripts report refusals as ``FQ_E_<CODE> detail`` error replies; :func:`translate_script_error`
turns them into typed exceptions through the one table :data:`ERROR_CODES`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Collection, Mapping
from importlib import resources

import attrs

from fairque_core.domain.errors import (
    DamagedKeyError,
    FairQueueError,
    LeaseLostError,
    LuaScriptError,
    PayloadTooLargeError,
    ScriptContractError,
    TaskIdConflictError,
    TaskValidationError,
)
from fairque_core.domain.limits import TenantQueueFullError
from fairque_core.domain.validation import is_digits
from fairque_core.settings.accel import Accelerators

__all__ = [
    "ERROR_CODES",
    "FAST_INCLUDES",
    "SCRIPTS",
    "IncludeCycleError",
    "ScriptSpec",
    "fast_includes",
    "load_source",
    "resolve",
    "sources_for",
    "translate_script_error",
]

_INCLUDE_RE = re.compile(r'^--- @include "([A-Za-z0-9_/]+)"\s*$')
# a top-level definition: ``local function NAME(``, ``local NAME =``, or a field of a helper
# table (``function FQ_DEPS.enter(``), a block of the table's name, so a script that uses the
# table carries all of its fields (the library's top level is near Lua's limit of 200 locals:
# helpers grouped in a table cost one)
_DEFINE_RE = re.compile(r"^(?:local (function )?([A-Za-z_]\w*)|(function )([A-Za-z_]\w*)[.:])")
_WORD_RE = re.compile(r"[A-Za-z_]\w*")
_ONE_LINE_END_RE = re.compile(r"\bend\s*$")

#: accelerator name -> the includes (bare names) it replaces by their ``_include/fast/`` version
FAST_INCLUDES: Mapping[str, frozenset[str]] = {"claim_view": frozenset({"claim_view"})}
#: Every include that has a fast version: what :func:`resolve` uses by default.
ALL_FAST: frozenset[str] = frozenset().union(*FAST_INCLUDES.values())


def fast_includes(accel: Accelerators) -> frozenset[str]:
    """The includes built in their fast version with the accelerators ``accel`` leaves on."""
    on = [names for name, names in FAST_INCLUDES.items() if accel.on(name)]
    return frozenset().union(*on)


#: The anchor keys every script declares (``KeySpace.anchors()``), in this order.
ANCHOR_KEYS: tuple[str, ...] = ("meta", "stats", "tiers", "delayed", "leases", "dlq")


class IncludeCycleError(ValueError):
    """Lua includes refer to each other in a cycle; ``chain`` shows it."""

    def __init__(self, chain: tuple[str, ...]) -> None:
        self.chain = chain
        super().__init__("Lua include cycle: " + " -> ".join(chain))


@attrs.frozen
class ScriptSpec:
    """One operation: its file name (without ``.lua``) and the KEYS it declares, in order.

    ``writes`` False: the script is flagged ``no-writes``. ``allow_oom`` True: the script runs
    when the server is at ``maxmemory`` (claims and acknowledgements keep draining the queue);
    only ``push`` is refused up front then, before it writes anything.
    """

    name: str
    keys: tuple[str, ...] = ANCHOR_KEYS
    writes: bool = True
    allow_oom: bool = True

    @property
    def shebang(self) -> str:
        """The first line the script file must have."""
        if not self.writes:
            return "#!lua flags=no-writes"
        return "#!lua flags=allow-oom" if self.allow_oom else "#!lua"


def load_source(name: str) -> str:
    """The raw text of ``lua/<name>.lua`` (``name`` may be ``_include/x``)."""
    *folders, leaf = name.split("/")
    path = resources.files("fairque_redis").joinpath("lua")
    for folder in folders:
        path = path.joinpath(folder)
    return path.joinpath(leaf + ".lua").read_text(encoding="utf-8")


def _blocks(lines: list[str]) -> list[tuple[str | None, list[str]]]:
    """Split include text into top-level blocks: ``(defined name, lines)``.

    A block is one ``local function NAME(`` ... ``end``, one ``local NAME = ...`` line or one
    ``function NAME.field(`` ... ``end`` (a field of helper table NAME), with the comment lines
    right above it; text outside any definition (a file's docblock) is a
    block of its own with no name and is dropped by the shaker.
    """
    out: list[tuple[str | None, list[str]]] = []
    pending: list[str] = []
    current: list[str] | None = None
    for line in lines:
        if current is not None:
            current.append(line)
            if line.startswith("end"):
                current = None
            continue
        match = _DEFINE_RE.match(line)
        if match is None:
            pending.append(line)
            continue
        local_function, local_name, field_function, table = match.groups()
        block = [*_trailing_comments(pending), line]
        if pending:
            out.append((None, pending))
        pending = []
        out.append((local_name or table, block))
        if (local_function or field_function) and not _ONE_LINE_END_RE.search(line):
            current = block
    if pending:
        out.append((None, pending))
    return out


def _trailing_comments(pending: list[str]) -> list[str]:
    """Move the comment lines at the end of ``pending`` (a definition's own comment) out."""
    k = len(pending)
    while k > 0 and pending[k - 1].startswith("--") and not pending[k - 1].startswith("--[["):
        k -= 1
    moved = pending[k:]
    del pending[k:]
    return moved


def resolve(
    name: str,
    loader: Callable[[str], str] = load_source,
    *,
    shake: bool = True,
    fast: Collection[str] = ALL_FAST,
) -> str:
    """Flatten script ``name``: every include inlined once, before its first user.

    Include names are relative to ``lua/``; a bare name (``"core"``) means ``_include/core``,
    or ``_include/fast/core`` when ``fast`` names it (the accelerated version, ADR 65; the
    plain one is the reference and both define the same functions).
    A shebang line (``#!lua ...``) stays the first line of the result. With ``shake`` (the
    default) only the included definitions the script uses, directly or through other
    included definitions, are emitted: every ``local function`` costs a closure on every call
    (ADR 0012), so ``push`` does not carry the claim helpers.
    """
    seen: set[str] = set()
    units: list[tuple[str, list[str]]] = []

    def norm(include: str) -> str:
        bare = include.removeprefix("_include/")
        if "/" not in bare and bare in fast:
            return f"_include/fast/{bare}"
        return include if "/" in include else f"_include/{include}"

    def visit(unit: str, chain: tuple[str, ...]) -> list[str]:
        if unit in chain:
            raise IncludeCycleError((*chain, unit))
        body: list[str] = []
        for line in loader(unit).splitlines():
            match = _INCLUDE_RE.match(line)
            if match is None:
                body.append(line)
                continue
            dep = norm(match.group(1))
            if dep in chain or dep == unit:
                raise IncludeCycleError((*chain, unit, dep))
            if dep in seen:
                continue
            dep_lines = visit(dep, (*chain, unit))
            seen.add(dep)
            units.append((dep, dep_lines))
        return body

    main = visit(name, ())
    shebang: list[str] = []
    if main and main[0].startswith("#!"):
        shebang = [main.pop(0)]
    parts: list[str] = []
    if not shake:
        for unit, lines in units:
            parts += [f"-- ---- include {unit} ----", *lines]
    else:
        blocks = [(unit, blk) for unit, lines in units for blk in _blocks(lines)]
        defined: dict[str, str] = {}
        for _, (defines, lines) in blocks:
            if defines is not None:  # a table's fields add to its text
                defined[defines] = defined.get(defines, "") + "\n".join(lines) + "\n"
        wanted: set[str] = set()
        todo = [w for w in _WORD_RE.findall("\n".join(main)) if w in defined]
        while todo:
            word = todo.pop()
            if word not in wanted:
                wanted.add(word)
                todo += [w for w in _WORD_RE.findall(defined[word]) if w in defined]
        last_unit = ""
        for unit, (defines, lines) in blocks:
            if defines is None or defines not in wanted:
                continue
            if unit != last_unit:
                parts.append(f"-- ---- include {unit} (used definitions only) ----")
                last_unit = unit
            parts += lines
    return "\n".join([*shebang, *parts, f"-- ---- script {name} ----", *main]) + "\n"


SCRIPTS: Mapping[str, ScriptSpec] = {
    spec.name: spec
    for spec in (
        ScriptSpec("push", allow_oom=False),
        ScriptSpec("push_plain", allow_oom=False),  # the plain push accelerator (ADR 80)
        ScriptSpec("ingest"),
        ScriptSpec("claim"),
        ScriptSpec("heartbeat"),
        ScriptSpec("finish"),
        ScriptSpec("finish_claim"),
        ScriptSpec("fail"),
        ScriptSpec("release"),
        ScriptSpec("requeue_expired"),
        ScriptSpec("cancel"),
        ScriptSpec("get", writes=False),
        ScriptSpec("record_get", writes=False),
        ScriptSpec("progress"),
        ScriptSpec("task_list", writes=False),
        ScriptSpec("watch"),
        ScriptSpec("xcom_get", writes=False),
        ScriptSpec("sizes", writes=False),
        ScriptSpec("stats", writes=False),
        ScriptSpec("tenants", writes=False),
        ScriptSpec("next_due", writes=False),
        ScriptSpec("set_weight"),
        ScriptSpec("set_limits"),
        ScriptSpec("limits_get", writes=False),
        ScriptSpec("set_key_limits"),
        ScriptSpec("key_limits_get", writes=False),
        ScriptSpec("pause"),
        ScriptSpec("paused_get", writes=False),
        ScriptSpec("dlq_list", writes=False),
        ScriptSpec("dlq_requeue"),
        ScriptSpec("dlq_purge"),
        ScriptSpec("purge_tenant"),
        ScriptSpec("purge_all"),
        ScriptSpec("tenant_weights", writes=False),
        ScriptSpec("tenant_figures", writes=False),
        ScriptSpec(
            "partition_summary", keys=("meta", "tiers", "delayed", "parked", "intake"), writes=False
        ),
        ScriptSpec("scheduler_lock", keys=("lock",)),
        ScriptSpec("schedule_mark", keys=("lock", "schedules", "fired")),
    )
}


@functools.cache
def sources_for(fast: frozenset[str] = ALL_FAST) -> Mapping[str, str]:
    """The flattened source of every script with the includes ``fast`` in their fast version
    (resolved once per set)."""
    return {name: resolve(name, fast=fast) for name in SCRIPTS}


#: The flattened source of every script, accelerators on, resolved once at import.
SOURCES: Mapping[str, str] = sources_for(ALL_FAST)


def _lease_lost(detail: str) -> FairQueueError:
    return LeaseLostError(detail)


def _unknown_dep(detail: str) -> FairQueueError:
    return TaskValidationError("depends_on", detail, "names no known task")


def _too_large(detail: str) -> FairQueueError:
    size, _, limit = detail.partition(" ")
    try:
        return PayloadTooLargeError(int(size), int(limit))
    except ValueError:
        return PayloadTooLargeError(-1, -1)


def _bad_id(detail: str) -> FairQueueError:
    return TaskValidationError(detail or "id", "<refused by the script>", "breaks the id grammar")


def _id_taken(detail: str) -> FairQueueError:
    return TaskIdConflictError(detail or "<refused by the script>")


def _queue_full(detail: str) -> FairQueueError:
    cap, _, tenant = detail.partition(" ")
    return TenantQueueFullError(tenant, int(cap) if is_digits(cap) else -1)


def _bad_arg(detail: str) -> FairQueueError:
    return TaskValidationError(detail or "argument", "<refused by the script>", "is malformed")


#: FQ_E_<CODE> -> how to build the exception from the detail text after the code.
def _damaged(detail: str) -> FairQueueError:
    # `<key> <found> <wanted>`, or tab-separated when the found value may hold spaces (a meta
    # field that is not a number: core.lua fq_meta)
    parts = detail.split("\t") if "\t" in detail else detail.split(" ")
    key, found, expected = ([*parts, "?", "?", "?"])[:3]
    return DamagedKeyError(key, found, expected)


ERROR_CODES: Mapping[str, Callable[[str], FairQueueError]] = {
    "LEASE_LOST": _lease_lost,
    "UNKNOWN_DEP": _unknown_dep,
    "TOO_LARGE": _too_large,
    "BAD_ID": _bad_id,
    "BAD_ARG": _bad_arg,
    "QUEUE_FULL": _queue_full,
    "ID_TAKEN": _id_taken,
    "DAMAGED": _damaged,
}

# what the server appends to an error a script raises (error(...)) rather than returns
_RAISED_SUFFIX = re.compile(r"\s+script: [^\n]*$")


def translate_script_error(script: str, message: str) -> FairQueueError:
    """The typed exception for a script's error reply ``message``."""
    text = message.strip()
    if text.startswith("FQ_E_"):
        code, _, detail = _RAISED_SUFFIX.sub("", text[5:]).partition(" ")
        make = ERROR_CODES.get(code)
        if make is None:
            return ScriptContractError(script, f"unknown error code FQ_E_{code}")
        return make(detail.strip())
    if "WRONGTYPE" in text:
        # a script that writes nothing checks no types up front (ADR 29): a damaged key it reads
        # fails the read itself. Still a damaged key, and nothing changed. A script that writes
        # met it past its checks (an active set of a strict tier other than 0): it may have
        # written before, and says so
        spec = SCRIPTS.get(script)
        return DamagedKeyError(
            f"<a key the {script} script reads>",
            "value of another type",
            "structure",
            partial=spec is not None and spec.writes,
        )
    return LuaScriptError(script, text)
