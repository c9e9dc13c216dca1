"""Deprecated spellings of public names (ADR 23), all built here so that every warning reads
the same and points at the caller's line.

The domain holds the tools (the records' old names use them, and the domain imports nothing
above it); ``fairque_core.app.deprecation`` re-exports them for the engines and the config.

- :func:`warn_renamed`: an old method or property kept as a thin alias calls it, then
  delegates.
- :func:`renamed_keyword`: a function whose keyword argument got a new name (it maps the old
  keyword, warns, and refuses both at once as Python refuses a duplicated argument).
- :func:`rename_init_keyword`: the same for a class's constructor (``Task(user_id=...)``),
  wrapping the ``__init__`` attrs generated, so type checkers keep seeing attrs' signature.

The aliases go in the first release after 1.0, not before two minor releases shipped them.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["rename_init_keyword", "renamed_keyword", "warn_renamed"]

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)

# warn_renamed <- the alias <- the caller
_CALLER = 3


def warn_renamed(old: str, new: str, *, stacklevel: int = _CALLER) -> None:
    """Emit the DeprecationWarning for ``old``, naming ``new`` (called from inside the alias)."""
    warnings.warn(f"{old} is deprecated; use {new} (ADR 23)", DeprecationWarning, stacklevel)


def _map_keyword(kwargs: dict[str, Any], func: str, what: str, old: str, new: str) -> None:
    """Move ``kwargs[old]`` to ``kwargs[new]`` with the warning (called by a wrapper called by
    the caller: the warning names the caller's line)."""
    if new in kwargs:
        raise TypeError(f"{func}() got both {old!r} and {new!r}")
    warn_renamed(f"the keyword {old}= of {what}", f"{new}=", stacklevel=_CALLER + 1)
    kwargs[new] = kwargs.pop(old)


def renamed_keyword(owner: str, old: str, new: str) -> Callable[[F], F]:
    """Accept the keyword ``old`` as ``new`` with a DeprecationWarning (works for coroutine
    functions too: the wrapper returns what the function returns)."""

    def decorate(func: F) -> F:
        what = f"{owner}.{func.__name__}"

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if old in kwargs:
                _map_keyword(kwargs, func.__name__, what, old, new)
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def rename_init_keyword(old: str, new: str) -> Callable[[C], C]:
    """Class decorator (put above ``@attrs.frozen``): ``cls(old=...)`` is ``cls(new=...)``
    with a DeprecationWarning; both at once is a TypeError (so is ``attrs.evolve(obj,
    old=...)``, which passes every field)."""

    def decorate(cls: C) -> C:
        init: Callable[..., None] = cls.__dict__["__init__"]  # the one attrs generated
        name = cls.__name__

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            if old in kwargs:
                _map_keyword(kwargs, name, f"{name}(...)", old, new)
            init(self, *args, **kwargs)

        cls.__init__ = __init__  # type: ignore[misc]
        return cls

    return decorate
