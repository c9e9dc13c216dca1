"""The retry schedule (exponential backoff with an optional jitter) and the retry/DLQ decision.

Pure and deterministic given an injected :class:`random.Random`. Retry plugins build on
:class:`RetrySchedule` and :func:`decide` (``fairque_plugins.RetryPolicy`` is such a plugin);
the engine turns a :class:`RetryDecision` into a backend
``fail(retry_delay=..., failure_type=..., reason=...)`` call. The schedule knows nothing of the
application's config: ``fairque_core.app.plugins.builtin.retry_schedule`` builds one from a
``QueueConfig``.
"""

from __future__ import annotations

import math
import random
from typing import Any

import attrs

from fairque_core.domain.enums import FailureType
from fairque_core.domain.errors import ConfigurationError, TaskValidationError

__all__ = ["RetryDecision", "RetrySchedule", "decide"]

# One shared generator for callers that inject none; tests pass their own seeded Random.
_DEFAULT_RNG = random.Random()


def _bad(attribute: attrs.Attribute[Any], value: object, rule: str) -> ConfigurationError:
    return ConfigurationError(
        f"invalid retry {attribute.name} {value!r}: {rule}", path=attribute.name, value=value
    )


def _finite_number(attribute: attrs.Attribute[Any], value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(attribute, value, "must be a number")
    if not math.isfinite(value):
        raise _bad(attribute, value, "must be finite")
    return float(value)


def _non_negative(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if _finite_number(attribute, value) < 0:
        raise _bad(attribute, value, "must be >= 0")


def _factor(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if _finite_number(attribute, value) < 1:
        raise _bad(attribute, value, "must be >= 1")


def _jitter(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not 0 <= _finite_number(attribute, value) < 1:
        raise _bad(attribute, value, "must be in [0, 1)")


def _count(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(attribute, value, "must be an int >= 0")


@attrs.frozen(kw_only=True)
class RetrySchedule:
    """Exponential backoff: attempt ``n`` (0-based) waits ``min(cap, base * factor**n)`` s.

    ``jitter`` is a fraction: the delay is multiplied by a uniform draw from
    ``[1 - jitter, 1 + jitter]`` and never exceeds ``cap``. ``max_retries`` is the default
    number of retries for tasks that do not carry their own.
    """

    base: float = attrs.field(default=1.0, validator=_non_negative)
    factor: float = attrs.field(default=2.0, validator=_factor)
    cap: float = attrs.field(default=300.0, validator=_non_negative)
    jitter: float = attrs.field(default=0.0, validator=_jitter)
    max_retries: int = attrs.field(default=3, validator=_count)

    def __attrs_post_init__(self) -> None:
        if self.cap < self.base:
            raise ConfigurationError(
                f"invalid retry cap {self.cap!r}: must be >= base ({self.base!r})",
                path="cap",
                value=self.cap,
            )

    def raw_delay(self, attempt: int) -> float:
        """The delay before retry number ``attempt`` (0-based) without jitter, capped."""
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
            raise TaskValidationError("attempt", attempt, "must be an int >= 0")
        if self.base == 0:
            return 0.0
        try:
            grown = self.base * self.factor**attempt
        except OverflowError:
            return self.cap
        return min(grown, self.cap)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The delay in seconds before retry number ``attempt`` (0-based), jitter applied."""
        raw = self.raw_delay(attempt)
        if self.jitter == 0 or raw == 0:
            return raw
        spread = (rng if rng is not None else _DEFAULT_RNG).uniform(
            1 - self.jitter, 1 + self.jitter
        )
        return min(raw * spread, self.cap)


@attrs.frozen(kw_only=True)
class RetryDecision:
    """What to do with a failed attempt: retry after ``retry_delay`` s, or (None) dead-letter."""

    retry_delay: float | None
    failure_type: FailureType = FailureType.FAILED
    reason: str = ""

    @classmethod
    def retry(cls, delay: float, reason: str = "") -> RetryDecision:
        """Retry after ``delay`` seconds (must be finite and >= 0)."""
        if isinstance(delay, bool) or not isinstance(delay, (int, float)):
            raise TaskValidationError("retry_delay", delay, "must be a number")
        if not math.isfinite(delay) or delay < 0:
            raise TaskValidationError("retry_delay", delay, "must be finite and >= 0")
        return cls(retry_delay=float(delay), failure_type=FailureType.FAILED, reason=reason)

    @classmethod
    def dead(cls, failure_type: FailureType, reason: str) -> RetryDecision:
        """Give up: into the dead-letter queue as ``failure_type`` with ``reason``."""
        return cls(retry_delay=None, failure_type=FailureType(failure_type), reason=reason)

    @property
    def is_retry(self) -> bool:
        return self.retry_delay is not None


def decide(
    policy: RetrySchedule,
    retry_count: int,
    max_retries: int | None,
    error: BaseException,
    *,
    rng: random.Random | None = None,
) -> RetryDecision:
    """Retry while ``retry_count < max_retries``, else dead-letter as FAILED.

    ``retry_count`` is how many retries the task already had (0 after its first failure), so
    the first retry waits ``policy.delay(0)``. ``max_retries=None`` uses the policy's own.
    The dead decision's reason is ``repr(error)``.
    """
    limit = policy.max_retries if max_retries is None else max_retries
    if retry_count < limit:
        return RetryDecision.retry(policy.delay(retry_count, rng))
    return RetryDecision.dead(FailureType.FAILED, repr(error))
