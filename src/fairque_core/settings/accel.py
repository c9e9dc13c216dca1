"""The off switches of the accelerators (ADR 65, docs/performance.md).

An accelerator is a second, faster path beside a reference path that it must equal. Each one
has a name here, and each can be turned off: the composition roots (``connect()``, the
engines, the workers) take an :class:`Accelerators` value, and by default read it from the
environment once, when they are built::

    FAIRQUE_ACCEL_OFF=all                      # every accelerator off: the reference path only
    FAIRQUE_ACCEL_OFF=push_coalescer,handoff   # these two off, the others on

With an accelerator off, fairque behaves the same and is only slower: that is what each
accelerator's equivalence test checks, with it on and off. An unknown name is a
:class:`~fairque_core.domain.errors.ConfigurationError`, so a typo cannot leave one on.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

import attrs

from fairque_core.domain.errors import ConfigurationError

#: The environment variable read by :meth:`Accelerators.from_env`.
ENV_VAR = "FAIRQUE_ACCEL_OFF"

#: Every accelerator, by the name its off switch uses; docs/performance.md has one row each.
NAMES: frozenset[str] = frozenset(
    {
        "push_coalescer",  # app/accel/push_coalescing.py: concurrent async pushes share round trips
        "plugin_shortcuts",  # app/accel/plugin_shortcuts.py: skip pluggy when no plugin listens
        "prebuilt_builders",  # app/accel/builders.py: Task/Message built without re-validation
        "handoff",  # app/worker/handoff.py: a handler's thread starts the next buffered task
        "functions",  # fairque_redis/scripting/function_library.py: scripts as a function library
        "claim_view",  # lua/_include/fast/claim_view.lua: one read of the active set per claim
        "intake",  # fairque_redis/accel/intake.py: the intake client (push_intake's batching)
    }
)


def _names(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


@attrs.frozen
class Accelerators:
    """Which accelerators are off. The default (nothing off) is the fast configuration."""

    off: frozenset[str] = attrs.field(default=frozenset(), converter=_names)

    def __attrs_post_init__(self) -> None:
        unknown = sorted(self.off - NAMES)
        if unknown:
            raise ConfigurationError(
                f"unknown accelerator(s) {', '.join(unknown)}; known: {', '.join(sorted(NAMES))}",
                path=ENV_VAR,
                value=",".join(unknown),
            )

    def on(self, name: str) -> bool:
        """Whether ``name`` is on; a name this module does not list is a programming error."""
        if name not in NAMES:
            raise KeyError(name)
        return name not in self.off

    @classmethod
    def none(cls) -> Accelerators:
        """Every accelerator off: the reference path only."""
        return cls(off=NAMES)

    @classmethod
    def parse(cls, text: str) -> Accelerators:
        """``"all"``, ``""`` or comma-separated names (spaces ignored)."""
        names = {part.strip() for part in text.split(",") if part.strip()}
        if "all" in names:
            return cls.none()
        return cls(off=frozenset(names))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Accelerators:
        """The switches named by ``$FAIRQUE_ACCEL_OFF`` (nothing off when unset)."""
        env = os.environ if environ is None else environ
        return cls.parse(env.get(ENV_VAR, ""))

    def without(self, names: Iterable[str]) -> Accelerators:
        """A copy with ``names`` turned off as well."""
        return Accelerators(off=self.off | frozenset(names))
