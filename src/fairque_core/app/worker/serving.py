"""Which queues a worker serves: its ``queue``, or its ``queues`` with their weights (ADR 69).

:func:`queues_and_weights` reads a worker's arguments; :func:`served_queues` builds the object
its loop calls: the queue itself when there is one, else a
:class:`~fairque_core.app.worker.served.ServedQueues` (or its asyncio twin) that shares each
claim between the queues and routes every call about a task to the queue that claimed it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, Union

from fairque_core.app.worker.served import ServedQueues
from fairque_core.app.worker.served_async import AsyncServedQueues
from fairque_core.domain.queue_picker import QUEUE_ORDERS, QueuePicker

__all__ = ["QueuesArg", "queues_and_weights", "served_queues"]

Q = TypeVar("Q")

#: ``queues=`` of a worker: queues (weight 1 each), ``(queue, weight)`` pairs, or a mapping of
#: queue to weight; in the order strict mode serves them.
QueuesArg = Union[Sequence[Union[Q, tuple[Q, float]]], Mapping[Q, float]]  # noqa: UP007


def queues_and_weights(
    queue: Q | None, queues: QueuesArg[Q] | None, order: str
) -> tuple[list[Q], list[float]]:
    """The queues a worker serves and their weights, from its ``queue`` or its ``queues``
    (exactly one of them). TypeError or ValueError for arguments that do not make a list."""
    if order not in QUEUE_ORDERS:
        raise ValueError(f"queue_order must be one of {', '.join(QUEUE_ORDERS)}, not {order!r}")
    if (queue is None) == (queues is None):
        raise TypeError("a worker takes a queue or queues=[...], one of them")
    if queue is not None:
        return [queue], [1.0]
    assert queues is not None
    pairs: list[tuple[Any, Any]]
    if isinstance(queues, Mapping):
        pairs = list(queues.items())
    elif isinstance(queues, (str, bytes)) or not isinstance(queues, Sequence):
        raise TypeError(f"queues must be a list of queues, not {type(queues).__name__}")
    else:
        pairs = [item if isinstance(item, tuple) else (item, 1.0) for item in queues]
    if not pairs:
        raise ValueError("queues=[] serves nothing: give at least one queue")
    for pair in pairs:
        if len(pair) != 2:
            raise TypeError(f"a queue with its weight is a pair (queue, weight), not {pair!r}")
    return [q for q, _ in pairs], [w for _, w in pairs]


def with_weights(queues: QueuesArg[Q] | None, weights: Sequence[float]) -> list[tuple[Q, float]]:
    """``queues`` (a list of queues) paired with ``weights`` (one per queue, in order):
    ``Worker(config, handler, [queue_a, queue_b], weights=[3, 1])``. TypeError or
    ValueError for lists that do not pair up."""
    if queues is None or isinstance(queues, Mapping) or not isinstance(queues, Sequence):
        raise TypeError("weights= goes with a list of queues")
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise TypeError(f"weights must be a list of numbers, not {type(weights).__name__}")
    if len(weights) != len(queues) or any(isinstance(q, tuple) for q in queues):
        raise ValueError(
            f"weights= needs one weight per queue ({len(queues)} queues, {len(weights)} weights)"
        )
    plain: list[Q] = [q for q in queues if not isinstance(q, tuple)]
    return list(zip(plain, weights, strict=True))


def served_queues(
    queues: Sequence[Any], weights: Sequence[float], order: str, *, asynchronous: bool
) -> Any:
    """What the worker's loop calls: the one queue, or the queues behind one face. ValueError
    for a bad weight, or a queue given twice."""
    if len(queues) == 1:
        QueuePicker(weights, order)  # the weight's check
        return queues[0]
    if asynchronous:
        return AsyncServedQueues(queues, weights, order)
    return ServedQueues(queues, weights, order)
