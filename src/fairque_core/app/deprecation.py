"""Deprecated spellings of public names (ADR 23), all built in one place so that every warning
reads the same and points at the caller's line.

The tools live in :mod:`fairque_core.domain.deprecation` (the records' old names use them too,
and the domain imports nothing above it); this module is where the engines and the config take
them from. :func:`warn_renamed` is for an old method kept as a thin alias (the alias calls it,
then delegates), :func:`renamed_keyword` for a method whose keyword argument got a new name (it
maps the old keyword, warns, and refuses both at once as Python refuses a duplicated argument).
The aliases go in the first release after 1.0, not before two minor releases shipped them.
"""

from __future__ import annotations

from fairque_core.domain.deprecation import renamed_keyword, warn_renamed

__all__ = ["renamed_keyword", "warn_renamed"]
