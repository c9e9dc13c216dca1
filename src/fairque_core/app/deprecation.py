"""Deprecated spellings of public names (ADR 23), all built here so that every warning reads
the same and points at the caller's line.

Two tools: :func:`warn_renamed` for an old method kept as a thin alias (the alias calls it, then
delegates), and :func:`renamed_keyword` for a method whose keyword argument got a new name (it
maps the old keyword, warns, and refuses both at once as Python refuses a duplicated argument).
The aliases go in the first release after 1.0, not before two minor releases shipped them.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["renamed_keyword", "warn_renamed"]

F = TypeVar("F", bound=Callable[..., Any])

# warn_renamed <- the alias <- the caller
_CALLER = 3


def warn_renamed(old: str, new: str, *, stacklevel: int = _CALLER) -> None:
    """Emit the DeprecationWarning for ``old``, naming ``new`` (called from inside the alias)."""
    warnings.warn(f"{old} is deprecated; use {new} (ADR 23)", DeprecationWarning, stacklevel)


def renamed_keyword(owner: str, old: str, new: str) -> Callable[[F], F]:
    """Accept the keyword ``old`` as ``new`` with a DeprecationWarning (works for coroutine
    functions too: the wrapper returns what the function returns)."""

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if old in kwargs:
                if new in kwargs:
                    raise TypeError(f"{func.__name__}() got both {old!r} and {new!r}")
                warn_renamed(
                    f"the keyword {old}= of {owner}.{func.__name__}",
                    f"{new}=",
                    stacklevel=_CALLER,
                )
                kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
