"""Loads: which tenant pushes how many tasks, when, with which priority and delay.

A load is a list of :class:`Arrival` records. Time in a load is counted in simulation *rounds*
(see :func:`fairque_testing.simulate`): round 0 is before the first claim, and the tasks of
round ``r`` are pushed just before the workers' ``r``-th claims. Loads add up with ``+``, and
the constructors below build the usual shapes::

    load = Load.flood("acme", 1000) + Load.steady("bob", per_round=1, rounds=200)
    load += Load.late("newcomer", 5, at=50)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from fairque_core.domain.enums import Priority
from fairque_core.domain.validation import validate_id

__all__ = ["Arrival", "Load"]


def _check_tenant(_instance: object, _attribute: object, value: str) -> None:
    validate_id(value, "tenant")


def _non_negative(_instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value!r}")


def _positive(_instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be >= 1, got {value!r}")


def _to_priority(value: Priority | int) -> Priority:
    return Priority.from_int(value)


@attrs.frozen
class Arrival:
    """``count`` tasks of ``tenant`` pushed just before the claims of round ``round``.

    ``delay`` is seconds from the push until the tasks are ready (on the queue's clock: with a
    fake clock the simulation moves time forward itself). ``priority`` is the tasks' priority;
    it orders a tenant's own tasks, never one tenant against another.
    """

    tenant: str = attrs.field(validator=_check_tenant)
    round: int = attrs.field(default=0, validator=_non_negative)
    count: int = attrs.field(default=1, validator=_positive)
    priority: Priority = attrs.field(default=Priority.NORMAL, converter=_to_priority)
    delay: float = attrs.field(default=0.0, validator=_non_negative)


def _to_arrivals(value: Iterable[Arrival]) -> tuple[Arrival, ...]:
    return tuple(value)


@attrs.frozen
class Load:
    """An ordered collection of arrivals (the order of equal rounds is the push order)."""

    arrivals: tuple[Arrival, ...] = attrs.field(default=(), converter=_to_arrivals)

    # ------------------------------------------------------------------ combining
    def __add__(self, other: Load | Iterable[Arrival]) -> Load:
        more = other.arrivals if isinstance(other, Load) else tuple(other)
        return Load(self.arrivals + more)

    def __iter__(self) -> Iterator[Arrival]:
        return iter(self.arrivals)

    def __len__(self) -> int:
        return len(self.arrivals)

    @property
    def total(self) -> int:
        """The number of tasks the load pushes."""
        return sum(a.count for a in self.arrivals)

    @property
    def tenants(self) -> list[str]:
        """The tenants of the load, in order of first appearance."""
        return list(dict.fromkeys(a.tenant for a in self.arrivals))

    @property
    def last_round(self) -> int:
        """The round of the last push (0 for an empty load)."""
        return max((a.round for a in self.arrivals), default=0)

    # ------------------------------------------------------------------ shapes
    @classmethod
    def flood(
        cls, tenant: str, count: int, *, at: int = 0, priority: Priority | int = Priority.NORMAL
    ) -> Load:
        """``count`` tasks at once, in round ``at`` (a backlog far larger than one round)."""
        return cls((Arrival(tenant, at, count, priority),))

    @classmethod
    def late(
        cls, tenant: str, count: int = 1, *, at: int, priority: Priority | int = Priority.NORMAL
    ) -> Load:
        """A tenant that first shows up in round ``at`` (the newcomer of fairness tests)."""
        return cls.flood(tenant, count, at=at, priority=priority)

    @classmethod
    def burst(
        cls,
        tenant: str,
        size: int,
        *,
        every: int,
        times: int,
        start: int = 0,
        priority: Priority | int = Priority.NORMAL,
    ) -> Load:
        """``times`` bursts of ``size`` tasks, one every ``every`` rounds from ``start``."""
        if every < 1 or times < 1:
            raise ValueError("every and times must be >= 1")
        return cls(Arrival(tenant, start + i * every, size, priority) for i in range(times))

    @classmethod
    def steady(
        cls,
        tenant: str,
        *,
        per_round: int = 1,
        rounds: int,
        start: int = 0,
        priority: Priority | int = Priority.NORMAL,
    ) -> Load:
        """``per_round`` tasks in each of ``rounds`` consecutive rounds from ``start``."""
        if rounds < 1:
            raise ValueError("rounds must be >= 1")
        return cls(Arrival(tenant, start + i, per_round, priority) for i in range(rounds))

    @classmethod
    def idle_and_return(
        cls,
        tenant: str,
        first: int,
        then: int,
        *,
        gap: int,
        start: int = 0,
        priority: Priority | int = Priority.NORMAL,
    ) -> Load:
        """``first`` tasks in round ``start``, nothing for ``gap`` rounds, then ``then`` more.

        The tenant is idle in between only if its first tasks are served within ``gap``
        rounds; the return then tests the newcomer rule again (idle time earns no credit).
        """
        if gap < 1:
            raise ValueError("gap must be >= 1")
        return cls(
            (Arrival(tenant, start, first, priority), Arrival(tenant, start + gap, then, priority))
        )

    @classmethod
    def delayed(
        cls,
        tenant: str,
        count: int,
        *,
        delay: float,
        at: int = 0,
        priority: Priority | int = Priority.NORMAL,
    ) -> Load:
        """``count`` tasks pushed in round ``at`` that become ready ``delay`` seconds later."""
        return cls((Arrival(tenant, at, count, priority, delay),))
