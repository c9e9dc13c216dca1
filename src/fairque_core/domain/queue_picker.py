"""How a worker that serves several queues shares its claims between them (ADR 69).

Each queue keeps its own scheduler, fair across its own tenants; this module only decides how
many of a worker's claimed places go to each queue. Two orders:

* **weighted** (the default): stride scheduling between queues, the rules of ADR 4 applied to
  queues instead of tenants. Each queue has a *pass* and a *stride*
  (``scoring.stride_for(weight)``); a claimed task charges its queue one stride. Each place
  of a claim goes to the queue of the lowest pass, ties to the queue named first. A queue
  whose claim came back short (it had nothing ready, or its tenants were held by their
  limits) is *idle* until a part of a later claim fills: while idle its pass is lifted to the
  virtual time (the lowest pass among the queues that are not idle), so time spent empty
  earns no credit, as a tenant's activation does not. Deterministic: no random picks (Asynq
  picks at random, in proportion).
* **strict**: the queues in the order given; a place goes to a later queue only when every
  earlier one came back short in this claim.

Bound (weighted, every queue backlogged): after ``T`` claimed tasks, queue ``i`` of weight
``w_i`` (sum ``W``, ``n`` queues) has had ``s_i`` with ``-n * w_i / W <= s_i - T * w_i / W <= 1``:
the pass of a queue is at most one of its strides above the lowest pass, since it is charged
only when it is the lowest. A queue back from idle, counted from its return, stays within
``[-n * w_i / W, 1 + n * w_i / W]``: it earned no credit while empty, and lost none.
``tests/property/test_queue_picker.py`` checks both.

No I/O, no clock: :class:`QueuePicker` plans a claim (:meth:`QueuePicker.plan`) and books
what each queue's part brought back (:meth:`QueuePicker.book`).
"""

from __future__ import annotations

from collections.abc import Sequence

from fairque_core.domain.errors import TaskValidationError
from fairque_core.domain.scoring import stride_for

__all__ = ["QUEUE_ORDERS", "QueuePicker"]

#: The orders between queues a worker may serve them in.
QUEUE_ORDERS = ("weighted", "strict")


class QueuePicker:
    """The share of each claim between ``len(weights)`` queues (see the module docstring).

    ``weights[i]`` is queue ``i``'s weight (as a tenant weight: ``stride_for`` checks it);
    ``order`` is ``"weighted"`` or ``"strict"`` (strict ignores the weights). Not thread-safe:
    its owner holds a lock around :meth:`plan` and :meth:`book` where threads share it.
    """

    def __init__(self, weights: Sequence[float], order: str = "weighted") -> None:
        if order not in QUEUE_ORDERS:
            raise ValueError(f"queue order must be one of {', '.join(QUEUE_ORDERS)}: {order!r}")
        if not weights:
            raise ValueError("a worker serves at least one queue")
        try:
            self.strides = [stride_for(w) for w in weights]
        except TaskValidationError as exc:
            raise ValueError(f"queue weight {exc.value!r} {exc.rule}") from None
        self.weights = tuple(float(w) for w in weights)
        self.order = order
        self.passes = [0] * len(self.strides)
        #: tasks claimed per queue since the start
        self.claimed = [0] * len(self.strides)
        #: whether each queue's last part came back short
        self.idle = [False] * len(self.strides)

    def plan(self, count: int, open_: Sequence[bool] | None = None) -> list[int]:
        """How many of ``count`` places to ask each queue for; ``open_[i]`` False leaves
        queue ``i`` out (its part in this claim came back short). Changes nothing."""
        n = len(self.strides)
        allowed = [True] * n if open_ is None else list(open_)
        out = [0] * n
        candidates = [i for i in range(n) if allowed[i]]
        if count <= 0 or not candidates:
            return out
        if self.order == "strict":
            out[candidates[0]] = count
            return out
        passes = list(self.passes)
        for _ in range(count):
            best = min(candidates, key=lambda i: (passes[i], i))
            out[best] += 1
            passes[best] += self.strides[best]
        return out

    def book(self, asked: Sequence[int], got: Sequence[int]) -> None:
        """One round of a claim: queue ``i`` was asked for ``asked[i]`` places and brought
        ``got[i]`` tasks. Charges each task; a queue that brought fewer than asked is idle (one
        that filled its part is not), and an idle queue's pass is lifted to the virtual time
        (the lowest pass of the queues that are not idle)."""
        for i, (a, g) in enumerate(zip(asked, got, strict=True)):
            if a <= 0:
                continue
            self.passes[i] += g * self.strides[i]
            self.claimed[i] += g
            self.idle[i] = g < a
        busy = [p for p, idle in zip(self.passes, self.idle, strict=True) if not idle]
        if busy:  # an idle queue follows the virtual time until it fills a part again
            vt = min(busy)
            for i, idle in enumerate(self.idle):
                if idle and self.passes[i] < vt:
                    self.passes[i] = vt
        self._rebase()

    def _rebase(self) -> None:
        """Keep the passes small: subtract the lowest (the picks depend on differences)."""
        low = min(self.passes)
        if low > 0:
            self.passes = [p - low for p in self.passes]

    def shares(self) -> list[float]:
        """Each queue's share of the tasks claimed so far (0 before any)."""
        total = sum(self.claimed)
        return [c / total if total else 0.0 for c in self.claimed]
