"""The retry policy plugin: backoff, a retry ceiling and errors that are never retried.

It decides, for each failed attempt, between "retry after n seconds" and "dead-letter queue as
failed/poisoned"; the backoff arithmetic is the domain's
:class:`~fairque_core.domain.retry.RetrySchedule`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import TYPE_CHECKING

from fairque_core.domain.enums import FailureType
from fairque_core.domain.errors import ConfigurationError
from fairque_core.domain.retry import RetryDecision, RetrySchedule, decide
from fairque_core.ports.hooks import hookimpl

if TYPE_CHECKING:
    from fairque_core.domain.models import Task

__all__ = ["RetryPolicy"]


class RetryPolicy:
    """Decides retries (``fairque_retry_decide``) ahead of the built-in default.

    * an error that is an instance of one of ``non_retriable`` goes to the dead-letter queue
      as ``poisoned`` at once (bad input will not get better by waiting);
    * otherwise the task is retried after ``min(cap, base * factor**n)`` seconds (``n`` = the
      retries it already had, ``jitter`` a fraction spread around that) while it has retries
      left: ``min(task.max_retries, max_retries)``, the policy's ``max_retries`` being a
      ceiling over what producers ask for;
    * then it goes to the dead-letter queue as ``failed``.

    ``rng`` makes the jitter deterministic in tests.
    """

    fairque_plugin_name = "fairque.retry"

    def __init__(
        self,
        max_retries: int = 3,
        *,
        base: float = 1.0,
        factor: float = 2.0,
        cap: float = 300.0,
        jitter: float = 0.0,
        non_retriable: Iterable[type[BaseException]] = (),
        rng: random.Random | None = None,
    ) -> None:
        self.backoff = RetrySchedule(
            base=base, factor=factor, cap=cap, jitter=jitter, max_retries=max_retries
        )
        kinds = tuple(non_retriable)
        for kind in kinds:
            if not (isinstance(kind, type) and issubclass(kind, BaseException)):
                raise ConfigurationError(
                    f"non_retriable must hold exception classes, not {kind!r}",
                    path="non_retriable",
                    value=kind,
                )
        self.non_retriable: tuple[type[BaseException], ...] = kinds
        self._rng = rng

    @property
    def max_retries(self) -> int:
        return self.backoff.max_retries

    def decide(self, task: Task, error: BaseException, attempt: int) -> RetryDecision:
        """The decision after failed attempt number ``attempt`` (1 for the first)."""
        if self.non_retriable and isinstance(error, self.non_retriable):
            return RetryDecision.dead(
                FailureType.POISONED, f"non-retriable {type(error).__name__}: {error}"
            )
        limit = min(task.max_retries, self.max_retries)
        return decide(self.backoff, max(0, attempt - 1), limit, error, rng=self._rng)

    @hookimpl
    def fairque_retry_decide(self, task: Task, error: BaseException, attempt: int) -> RetryDecision:
        return self.decide(task, error, attempt)

    def __repr__(self) -> str:
        names = ", ".join(kind.__name__ for kind in self.non_retriable)
        return f"RetryPolicy({self.backoff!r}, non_retriable=({names}))"
