"""What the two worker drivers share (ADR 20): their settings, ``health``, the handler
callbacks they make, and which queue call each action of the loop means.

:class:`~fairque_core.app.worker.worker.Worker` (threads) and
:class:`~fairque_core.app.worker.worker_async.AsyncWorker` (asyncio) carry out the actions of the
same
:class:`~fairque_core.app.worker.loop.WorkerLoop`; they differ in how they wait and run
handlers. :func:`queue_call` turns an action that calls the queue into that call, ready to
make: the driver makes it (a plain call, or awaited) and hands its result to the loop. No I/O
here.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast

import attrs

from fairque_core.app import context
from fairque_core.app.worker import actions as wa
from fairque_core.app.worker import loop as wl
from fairque_core.app.worker.handlers import TaskHandler
from fairque_core.app.worker.handoff import HandOffSteps
from fairque_core.app.worker.loop import logger
from fairque_core.app.worker.pacing import LISTEN_MIN_WAIT_SECONDS, listener_pause
from fairque_core.app.worker.registry import Registration
from fairque_core.app.worker.served import ServedQueues
from fairque_core.app.worker.served_async import AsyncServedQueues
from fairque_core.app.worker.serving import (
    QueuesArg,
    queues_and_weights,
    served_queues,
    with_weights,
)
from fairque_core.domain.errors import NotReplicatedError
from fairque_core.domain.models import Task
from fairque_core.settings.accel import Accelerators
from fairque_core.settings.config import QueueConfig, WorkerConfig

__all__ = [
    "ClaimScope",
    "DrivenQueue",
    "WorkerDriver",
    "claim_and_acks",
    "finish_and_claim_call",
    "queue_call",
]


class Flag(Protocol):
    """A threading or an asyncio event, as far as the shared code uses it."""

    def set(self) -> None: ...

    def clear(self) -> None: ...

    def is_set(self) -> bool: ...


class DrivenQueue(Protocol):
    """The queue calls a worker makes: those of a FairQueue, or of an AsyncFairQueue (whose
    calls return awaitables)."""

    @property
    def config(self) -> QueueConfig: ...

    def claim_batch(
        self,
        count: int,
        assigned: Sequence[str] | None = None,
        *,
        steal: Sequence[str] | None = None,
        worker_id: str = "",
    ) -> Any: ...

    def finish_batch(
        self, items: Sequence[tuple[Task, object]], *, run_seconds: Sequence[float] | None = None
    ) -> Any: ...

    def finish_and_claim(
        self,
        items: Sequence[tuple[Task, object]],
        count: int,
        assigned: Sequence[str] | None = None,
        *,
        steal: Sequence[str] | None = None,
        worker_id: str = "",
        run_seconds: Sequence[float] | None = None,
    ) -> Any: ...

    def fail(
        self, task: Task, error: BaseException, *, run_seconds: float | None = None
    ) -> Any: ...

    def release(self, task: Task) -> Any: ...

    def heartbeat_leases(self, tasks: Sequence[Task]) -> Any: ...

    def requeue_expired(self, limit: int = 100) -> Any: ...

    def wait_for_work(self, timeout: float) -> Any: ...

    def claim_when_ready(
        self,
        count: int,
        assigned: Sequence[str] | None = None,
        *,
        steal: Sequence[str] | None = None,
        worker_id: str = "",
        timeout: float,
    ) -> Any: ...


@attrs.frozen
class ClaimScope:
    """Whose tasks a worker claims: its ``assigned_tenants`` first, then its ``steal_targets``
    (None: no list, any tenant), and the worker id its claims carry."""

    assigned: list[str] | None
    steal: list[str] | None
    worker_id: str

    @classmethod
    def of(cls, config: WorkerConfig) -> ClaimScope:
        return cls(
            list(config.assigned_tenants) or None, list(config.steal_targets) or None, config.id
        )


def queue_call(queue: DrivenQueue, action: wa.Action, scope: ClaimScope) -> Callable[[], Any]:
    """The queue call ``action`` asks for, with its arguments, not yet made. Its return value
    (awaited, for an async queue) is what the loop's ``done`` gets. A :class:`wa.Claim` means
    the claim alone: the ack batch it may carry is the driver's to send alongside.
    TypeError for an action that does not call the queue."""
    if isinstance(action, wa.Claim):
        return functools.partial(
            queue.claim_batch,
            action.count,
            scope.assigned,
            steal=scope.steal,
            worker_id=scope.worker_id,
        )
    if isinstance(action, wa.Ack):
        return functools.partial(queue.finish_batch, action.items, run_seconds=action.run_seconds)
    if isinstance(action, wa.Fail):
        slot = action.slot
        return functools.partial(queue.fail, slot.task, action.error, run_seconds=slot.run_seconds)
    if isinstance(action, wa.Release):
        return functools.partial(queue.release, action.slot.task)  # returns None
    if isinstance(action, wa.Heartbeat):
        return functools.partial(queue.heartbeat_leases, action.tasks)
    if isinstance(action, wa.Reap):
        return functools.partial(queue.requeue_expired, action.limit)
    raise TypeError(f"not a queue call: worker action {action!r}")


def finish_and_claim_call(
    queue: DrivenQueue, action: wa.Claim, acks: wa.Ack, scope: ClaimScope
) -> Callable[[], Any]:
    """The one queue call for a :class:`wa.Claim` that carries ``acks`` (ADR 40):
    ``finish_and_claim``, whose result (or exception) :func:`claim_and_acks` reads."""
    return functools.partial(
        queue.finish_and_claim,
        acks.items,
        action.count,
        scope.assigned,
        steal=scope.steal,
        worker_id=scope.worker_id,
        run_seconds=acks.run_seconds,
    )


def claim_and_acks(got: Any) -> tuple[Any, Any]:
    """``finish_and_claim``'s result ``(flags, tasks)``, or the exception it raised, as the
    loop's Claim with acks is answered: ``(tasks or error, flags or error)``. An error fails
    both parts, except NotReplicatedError, raised after both were applied: its ``result``
    holds the claimed tasks (leased: the loop books them) and the acknowledgements stay
    unconfirmed (the loop sends them again; a repeated finish is idempotent, ADR 19)."""
    if isinstance(got, NotReplicatedError) and isinstance(got.result, tuple):
        return got.result[1], got
    if isinstance(got, BaseException):
        return got, got
    flags, tasks = got
    return tasks, flags


Q = TypeVar("Q", bound=DrivenQueue)


class WorkerDriver(Generic[Q]):
    """The part of a worker driver that does not depend on how it waits.

    ``__init__`` takes the settings every worker takes (its ``queue``, or its ``queues`` with
    their weights and ``queue_order``: then the loop calls a
    :class:`~fairque_core.app.worker.served.ServedQueues` face over them, ADR 69, and
    :meth:`_queue_of` gives a task's own queue), then calls :meth:`_init_driver` for the
    driver's own state, which sets ``_wake`` (set to wake the control loop) and ``_listen``
    (set while the loop wants the queue's wake signal listened for). A driver starts its loop
    with :meth:`_begin`, reports a crash of its control loop with :meth:`_crashed`, makes the
    handler callbacks of an ended task with :meth:`_task_ended` and of timed-out ones with
    :meth:`_timed_out` (which calls its :meth:`_cancel`), makes each queue call as
    :meth:`_queue_call` says, and hands what its wake listener heard to :meth:`_listened`.

    While :attr:`listener_claims` is on (the default) the listener does not wake the loop to
    claim: the loop hands it the claim (a :class:`wa.Sleep` with ``claim``; the driver passes
    it on with :meth:`_hand_out`) and the listener makes it with ``claim_when_ready``
    (:meth:`_listener_claim`): the wait for work and the claim in one round trip (ADR 38).
    The listener hands what it brought straight to the loop (``listener_claimed``), so
    :meth:`health` counts those tasks before the loop's next cycle books them.

    ``_guard`` is held around every call that changes what :meth:`health` reads (the loop's
    ``next_action``, ``stop``, ``listener_claimed``, ``crashed``) and by :meth:`health`
    itself, which any thread may call: a snapshot never sees a task between two books (an
    answer taken and not yet booked, a claim settled and its tasks not yet held). Those calls
    make no I/O, so it is held for microseconds.
    """

    #: The listener claims for the idle loop (ADR 38); False: it only wakes the loop, which
    #: then claims (the way before, kept for the A/B benchmark ``bench/bench_wake_claim.py``).
    listener_claims: ClassVar[bool] = True
    #: A claim that carries acknowledgements is one ``finish_and_claim`` call where the queue's
    #: backend makes it one call (ADR 40); False: the claim and ``finish_batch`` go as two
    #: calls at once (the way before, kept for the A/B benchmark ``bench/bench_worker.py``).
    combined_acks: ClassVar[bool] = True
    #: ... while its acks and claimed places number at most this (None: any). A larger pair
    #: goes as two calls at once: the client reads one reply while the server runs the other
    #: call, which outweighs the one call's saving there (ADR 40, bench_finish_claim.py).
    combined_acks_limit: ClassVar[int | None] = 40
    #: The least wait of a claim handed to the listener when the queue's backend blocks on its
    #: wake signal (``claim_when_ready``, ADR 38): see ``LISTEN_MIN_WAIT_SECONDS`` (ADR 46).
    #: 0: the idle poll's wait (the way before, kept for the A/B benchmark
    #: ``bench/bench_worker.py --latency-ab``).
    listen_floor: ClassVar[float] = LISTEN_MIN_WAIT_SECONDS
    #: Whether the queue's calls are coroutines: an AsyncWorker drives an AsyncFairQueue, a
    #: Worker a FairQueue (checked at construction, TypeError otherwise).
    asynchronous: ClassVar[bool] = False

    _wake: Flag
    _listen: Flag

    def __init__(
        self,
        config: WorkerConfig,
        handler: TaskHandler,
        queue: Q | None = None,
        *,
        queues: QueuesArg[Q] | None = None,
        queue_order: str | None = None,
        weights: Sequence[float] | None = None,
        prefetch: int | None = None,
        accel: Accelerators | None = None,
    ) -> None:
        given: Any = queue
        if isinstance(given, (list, tuple)) and queues is None:  # Worker(c, h, [qa, qb], ...)
            queues, queue = list(given), None
        if weights is not None:
            queues = with_weights(queues, weights)
        if queue is None and queues is None:
            self._check_parts(config, handler, queue)  # a TypeError that names the queue
        if queue_order is None:
            queue_order = getattr(config, "queue_order", "weighted")
        served, weights = queues_and_weights(queue, queues, queue_order)
        for one in served:
            self._check_parts(config, handler, one)
        # what the loop calls: the queue, or the queues behind one face (ADR 69)
        calls: Any = served_queues(
            served, weights, queue_order, asynchronous=type(self).asynchronous
        )
        self.accel = Accelerators.from_env() if accel is None else accel
        # the listener claims (ADR 38) unless switched off or the queue cannot
        self._claiming = type(self).listener_claims and hasattr(calls, "claim_when_ready")
        # the listener's claim blocks on the wake signal only where the backend makes it so
        blocks = hasattr(getattr(calls, "backend", None), "claim_when_ready") or bool(
            getattr(calls, "blocks_on_wake", False)
        )
        self._loop = wl.WorkerLoop(
            config,
            lease_seconds=calls.config.lease_seconds,
            prefetch=prefetch,
            listener_claims=self._claiming,
            listen_floor=type(self).listen_floor if self._claiming and blocks else 0.0,
        )
        # the hand-off accelerator (ADR 46, 51): handlers' threads (or asyncio tasks) and the
        # listener start tasks between the loop's cycles; off, the loop starts every task
        self._hand_off: HandOffSteps | None = (
            HandOffSteps.plug(self._loop) if self.accel.on("handoff") else None
        )
        self.config = config
        self.handler = handler
        #: the queue this worker serves; with ``queues=``, the first (see :attr:`queues`)
        self.queue: Q = served[0]
        #: every queue this worker serves, in the order given
        self.queues: tuple[Q, ...] = tuple(served)
        self._calls: DrivenQueue = calls
        self._served: ServedQueues | AsyncServedQueues | None = (
            calls if isinstance(calls, (ServedQueues, AsyncServedQueues)) else None
        )
        self.prefetch = prefetch
        self._scope = ClaimScope.of(config)
        self._force = False  # a second stop request: do not wait for running tasks
        self._started = False
        #: one record per queue served (ADR 69, 72): ``fairque workers`` of each lists it
        self._registrations: list[Registration] = []
        self._listen_failures = 0  # failed waits for the wake signal in a row
        self._handed: wa.Sleep | None = None  # the claim the loop handed to the listener
        # see the class docstring; re-entrant: a signal handler on the thread that holds it
        # (the main thread, running the event loop) may still call health()
        self._guard = threading.RLock()
        # acknowledgements ride on the claim in one call (ADR 40) unless switched off or the
        # queue's backend would make it two calls anyway
        self._combining = type(self).combined_acks and bool(
            getattr(calls, "combines_finish_and_claim", False)
        )
        #: Called with a running task canceled with ``terminate=True`` (ADR 76): ``fairque
        #: worker --processes`` sets it in each child to end that process; None: the cancel
        #: is a cooperative one (the handler is told, an async one's coroutine cancelled).
        self.on_terminate: Callable[[Task], object] | None = None
        self._init_driver()

    @classmethod
    def _check_parts(cls, config: object, handler: object, queue: object) -> None:
        """TypeError, before anything starts, for parts a worker cannot run with (they
        failed later with an AttributeError, or an AsyncWorker on a sync queue looped for
        ever on a TypeError it logged)."""
        name = cls.__name__
        if not isinstance(config, WorkerConfig):
            raise TypeError(f"{name}: config must be a WorkerConfig, not {type(config).__name__}")
        if not any(
            callable(getattr(handler, method, None))
            for method in ("process_task", "process_task_async")
        ):
            raise TypeError(
                f"{name}: handler must be a TaskHandler (with process_task), "
                f"not {type(handler).__name__}"
            )
        expected = "AsyncFairQueue" if cls.asynchronous else "FairQueue"
        claim = getattr(queue, "claim_batch", None)
        if not callable(claim) or not isinstance(getattr(queue, "config", None), QueueConfig):
            raise TypeError(f"{name}: queue must be a {expected}, not {type(queue).__name__}")
        if inspect.iscoroutinefunction(claim) is not cls.asynchronous:
            raise TypeError(
                f"{name} drives a {expected}: {type(queue).__name__} is the "
                f"{'sync' if cls.asynchronous else 'asyncio'} face"
            )

    def _init_driver(self) -> None:
        """The driver's own state (called at the end of ``__init__``)."""
        raise NotImplementedError

    def _cancel(self, slot: wa.Slot) -> None:
        """Cancel the handler of a timed-out task, where the runtime can."""
        raise NotImplementedError

    def _stop_canceled(self, slot: wa.Slot) -> None:
        """Stop the handler of a canceled task where the runtime can (an async handler's
        coroutine); a thread's handler sees ``ctx.cancelled`` only."""

    def _no_call(self, action: wa.Expire | wa.CancelRunning) -> None:
        """An action that calls no queue: tasks past their timeout, or canceled tasks."""
        if isinstance(action, wa.Expire):
            self._timed_out(action.slots)
        else:
            self._canceled(action)

    def _canceled(self, action: wa.CancelRunning) -> None:
        """These running tasks were canceled (ADR 76): each handler told (``ctx.cancelled``,
        then stopped where the runtime can); with ``terminate``, :attr:`on_terminate`."""
        for slot in action.slots:
            context.cancel(slot.task)
            self._stop_canceled(slot)
        terminate = self.on_terminate
        if action.terminate and terminate is not None:
            for slot in action.slots:
                terminate(slot.task)

    def health(self) -> dict[str, Any]:
        """A snapshot: state, sizes, counters, last error and last claim time, and the claims
        sent and settled (see :meth:`fairque_core.app.worker.loop.WorkerLoop.health`;
        ``in_flight`` counts the tasks the listener brought before the loop books them)."""
        with self._guard:
            out = self._loop.health(time.monotonic(), time.time())
        out["worker_id"] = self.config.id
        # the server's settings as the queues' backends last found them (issue 34): while
        # unsafe, claims are refused and the worker backs off; this says why
        problems = [p for p in (getattr(q, "server_problem", None) for q in self.queues) if p]
        out["server_unsafe"] = int(bool(problems))
        out["server_problem"] = problems[0] if problems else None
        if self._served is not None:  # several queues: each one's share (ADR 69)
            out["queue_order"] = self._served.order
            out["queues"] = self._served.health()
        return out

    def _queue_of(self, task: Task) -> Q:
        """The queue that claimed ``task`` (its plugins run its handler, its settings bound
        its result)."""
        if self._served is None:
            return self.queue
        return cast(Q, self._served.queue_of(task))

    @property
    def state(self) -> str:
        return self._loop.state

    def _begin(self) -> None:
        """Start the loop and this worker's record in the queue's workers registry
        (``fairque workers``, the dashboard; none with ``registry_interval_seconds`` 0 or a
        backend without a registry); RuntimeError when this worker was already started."""
        if self._started:
            raise RuntimeError("this worker was already started")
        self._started = True
        self._loop.start()
        config = self.config
        for queue in self.queues:
            registration = Registration.of(
                queue, config.id, config.max_concurrent_tasks, config.registry_interval_seconds
            )
            if registration is None:
                continue
            self._registrations.append(registration)
            if self.asynchronous:  # its backend's calls are coroutines: an asyncio task beats
                registration.start_task(self.health)
            else:
                registration.start_thread(self.health)

    def _unregister_thread(self) -> None:
        """A sync worker's clean stop: its beat thread ends and its record is deleted."""
        for registration in self._registrations:
            registration.stop_thread()

    def _stop_wait(self, timeout: float | None) -> float:
        """How long ``stop`` waits: ``timeout``, by default the shutdown timeout + 5 s."""
        return self.config.graceful_shutdown_timeout + 5.0 if timeout is None else timeout

    def _queue_call(self, action: wa.Action) -> Callable[[], Any]:
        return queue_call(self._calls, action, self._scope)

    def _combined_call(self, action: wa.Claim) -> Callable[[], Any] | None:
        """The one call for a Claim with acks (its result read by :func:`claim_and_acks`),
        or None: the claim and the acks go as two calls."""
        limit = type(self).combined_acks_limit
        if not self._combining or action.acks is None:
            return None
        if limit is not None and len(action.acks.items) + action.count > limit:
            return None
        return finish_and_claim_call(self._calls, action, action.acks, self._scope)

    def _crashed(self, exc: BaseException) -> None:
        """The control loop raised ``exc``: a bug, not an outage. Report it, never hang."""
        logger.exception("worker %s: control loop crashed", self.config.id)
        with self._guard:
            self._loop.crashed(exc, time.monotonic())

    def _task_ended(self, slot: wa.Slot, ok: bool, value: Any) -> None:
        """The success or failure callback of a task whose handler returned ``value`` or
        raised it; none for a task that timed out (it had ``on_task_timeout``), nor for one
        canceled while it ran (its context is dropped: no finish or fail comes for it)."""
        if slot.canceled:
            context.discard(slot.task)
            return
        if slot.timed_out:
            return
        if ok:
            wl.safe_callback("on_task_success", self.handler.on_task_success, slot.task, value)
        else:
            wl.safe_callback("on_task_failure", self.handler.on_task_failure, slot.task, value)

    def _book_end(
        self, hand_off: HandOffSteps, slot: wa.Slot, ok: bool, value: Any, seconds: float
    ) -> wa.Slot | None:
        """With the hand-off: the end of ``slot``'s task booked on the thread (or asyncio task)
        that ran it, waking the control loop when the end changes what it waits for; the next
        buffered task for that thread or task to run, or None (ADR 51)."""
        with self._guard:
            next_slot, wake = hand_off.task_ended(slot, ok, value, seconds, time.monotonic())
        if wake and not self._wake.is_set():
            self._wake.set()
        return next_slot

    def _timed_out(self, slots: Sequence[wa.Slot]) -> None:
        """These running tasks passed their timeout (a :class:`wa.Expire`)."""
        for slot in slots:
            wl.safe_callback("on_task_timeout", self.handler.on_task_timeout, slot.task)
            self._cancel(slot)

    def _hand_out(self, action: wa.Sleep) -> None:
        """The loop's sleep hands its claim to the listener (``action.claim`` > 0): keep it
        for the listener and let it run. One is out at a time (the loop hands out no other
        before its answer), so the listener never misses one."""
        self._handed = action
        self._listen.set()

    def _start_handed(self, listen: bool) -> list[wa.Slot]:
        """Under the guard, the listener's answer just booked: while the control loop sleeps,
        the tasks it brought, to start from the listener's side, and the next claim kept for
        the next listener (set ``_listen`` too when ``listen``), so that neither waits for a
        loop cycle (ADR 46). None without the hand-off: the loop's cycle starts them."""
        hand_off = self._hand_off
        if hand_off is None:
            return []
        now = time.monotonic()
        slots = hand_off.start_handed(now)
        handing = hand_off.hand_next(now) if slots else None
        if handing is not None:
            self._handed = handing
            if listen:
                self._listen.set()
        return slots

    def _take_hand_out(self) -> wa.Sleep | None:
        """The claim handed to the listener, if one waits (the listener takes it)."""
        self._listen.clear()
        handed, self._handed = self._handed, None
        return handed

    def _listen_call(self) -> Callable[[], Any]:
        """The wake listener's next call: the claim the loop handed out (the driver's
        ``_claim_for_loop``: it makes the claim and hands the loop what it brought, an error
        too, which it then raises for :meth:`_listened`), or, without listener claims, the
        wait for the wake signal (True: it came)."""
        if self._claiming:
            return self._claim_for_loop
        return functools.partial(self._calls.wait_for_work, self.config.poll_interval_seconds)

    def _claim_for_loop(self) -> Any:
        raise NotImplementedError

    def _release_failed(self, task: Task, exc: Exception) -> None:
        """A task claimed for a loop that had ended could not be released: its lease expires
        and the reaper hands it on."""
        logger.warning("worker %s: release of %s: %s", self.config.id, task.task_id, exc)

    def _listener_claim(self, handed: wa.Sleep) -> Callable[[], Any]:
        """The listener's call for ``handed``: ``claim_when_ready`` of ``handed.claim`` tasks,
        its wait ending by ``handed.claim_by`` (the loop's idle poll), within a poll interval."""
        left = handed.claim_by - time.monotonic()
        return functools.partial(
            self._calls.claim_when_ready,
            handed.claim,
            self._scope.assigned,
            steal=self._scope.steal,
            worker_id=self._scope.worker_id,
            timeout=min(max(0.0, left), self.config.poll_interval_seconds),
        )

    def _listened(self, woke: bool | Exception) -> float | None:
        """What the wake listener's wait for the queue's wake signal came to: ``woke`` (the
        signal came: wake the loop, stop listening), or the exception it raised (an outage, a
        closed queue: the loop reports it on its own next call). How long the listener pauses
        before it listens again: None when it need not."""
        if isinstance(woke, Exception):
            self._listen_failures += 1
            logger.debug("worker %s: wake listener: %s", self.config.id, woke)
            return listener_pause(self._listen_failures)
        self._listen_failures = 0
        if woke:
            self._listen.clear()
            self._wake.set()
        return None
