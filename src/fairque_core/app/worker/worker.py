"""Worker: runs tasks from a :class:`~fairque_core.app.engine.queue.FairQueue` on a pool of threads.

One control thread owns every queue call: it claims in batches (as many tasks as there are
free places, plus a ``prefetch`` that adapts to how fast tasks finish), acknowledges finished
tasks in batches (``finish_batch``: one backend call, usually sent alongside the next claim),
extends the leases of everything it holds, runs the reaper, enforces task timeouts and backs
off when the backend is unreachable. Handler code runs on pool threads; one of them at a time
is the wake listener (it waits for work and makes the idle claim, ADR 38). A thread never touches
the queue while it runs a handler, so a slow handler cannot delay heartbeats. With the hand-off
accelerator on (the default; ``FAIRQUE_ACCEL_OFF=handoff`` turns it off, ADR 65), the listener
runs the first task its claim brought itself after handing the listening to another (ADR 46),
and a thread whose handler returns books the end with the loop and runs the next buffered task
itself while a place is free, so the places do not wait for a cycle of the control thread (ADR
51); off, the control thread starts every task.

A Python thread cannot be killed. When a sync task passes ``task_timeout_seconds`` it is
failed at once with :class:`~fairque_core.domain.errors.TaskTimeoutError` (retry or DLQ by policy),
its result is dropped whenever the thread returns, and its place is given back as long as fewer
than ``max_concurrent_tasks`` such stuck threads exist (past that, the place is freed only when
the thread returns, so a wedged handler cannot make the worker spawn threads without bound).

Graceful stop: claiming stops, claimed-but-unstarted tasks are released at once (back at the
head of their queue, no attempt counted), running tasks get up to
``graceful_shutdown_timeout`` to finish and be acknowledged. Tasks still running after that
keep their lease until it expires, and the reaper hands them to another worker.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from queue import SimpleQueue
from typing import Any

from fairque_core.app.engine.messages import encode_result
from fairque_core.app.engine.queue import FairQueue
from fairque_core.app.worker import actions as wa
from fairque_core.app.worker.driver import WorkerDriver, claim_and_acks
from fairque_core.app.worker.loop import logger
from fairque_core.app.worker.signal_latch import SignalLatch
from fairque_core.domain.models import Task

__all__ = ["Worker"]


class _Pool:
    """Daemon threads that run jobs (a task's slot, or a callable: the wake listener's turn,
    ADR 46); grows to the number of jobs running at once. After ``shutdown`` a thread whose
    job ends leaves instead of waiting for another."""

    def __init__(self, run: Callable[[wa.Slot], None], name: str) -> None:
        self._run = run
        self._name = name
        self._jobs: SimpleQueue[wa.Slot | Callable[[], None] | None] = SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._threads = 0
        self._closed = False

    def submit(self, job: wa.Slot | Callable[[], None]) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
            else:
                self._threads += 1
                thread = threading.Thread(
                    target=self._loop, name=f"{self._name}-{self._threads}", daemon=True
                )
                thread.start()
        self._jobs.put(job)

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if isinstance(job, wa.Slot):
                self._run(job)
            else:
                job()
            with self._lock:
                if self._closed:
                    self._threads -= 1
                    return
                self._idle += 1

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, 0
            self._threads -= idle
        for _ in range(idle):
            self._jobs.put(None)


class Worker(WorkerDriver[FairQueue]):
    """Claims tasks fairly and runs them with ``handler`` on up to ``max_concurrent_tasks``
    threads. ``start()`` runs it in the background, ``run()`` in the foreground with signal
    handling, ``stop()`` shuts it down gracefully, ``health()`` reports its state.

    ``Worker(config, handler, queue, *, prefetch=None, accel=None)``, or
    ``Worker(config, handler, queues=[...], queue_order="weighted")`` for several queues
    (ADR 69): ``queues`` lists queues, ``(queue, weight)`` pairs, or maps queue to weight;
    each claim's places are shared between them by stride scheduling on the weights
    (``"strict"``: a later queue only when the earlier ones came back short; default
    ``config.queue_order``), each queue fair across its own tenants; ``queue`` is then the
    first, ``queues`` all of them, and ``health()`` adds each queue's share.

    ``prefetch`` claims that many tasks beyond the free places, to hide claim latency; they
    are heartbeated while they wait and released at once on stop. None (the default) adapts
    it to how fast tasks finish: deep for fast tasks, none for tasks much slower than a claim
    round trip, and bounded by a fraction of the lease (ADR 30). ``accel``: which accelerators
    are on (default :meth:`~fairque_core.settings.accel.Accelerators.from_env`); this one uses
    ``handoff``.

    Every decision is the :class:`~fairque_core.app.worker.loop.WorkerLoop`'s; this class only
    carries its actions out on threads.
    """

    _wake: threading.Event
    _listen: threading.Event

    def _init_driver(self) -> None:
        self._run_task: Callable[[Task], object] = getattr(self.handler, "run_sync", None) or (
            self.handler.process_task
        )
        self._wake = threading.Event()
        self._awake = threading.Event()  # clear while the control thread sleeps
        self._awake.set()
        self._stop_requested = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._completions: SimpleQueue[tuple[wa.Slot, bool, Any, float]] = SimpleQueue()
        self._pool = _Pool(self._execute, f"fairque-{self.config.id}")
        self._in_handler = threading.local()  # .active: this thread runs one of our handlers
        self._acker: ThreadPoolExecutor | None = None
        # set while the loop's last claim came back short and there is room: then the listener
        # thread waits on the queue's wake signal and wakes the loop when it comes (or, with
        # listener_claims, makes the claim the loop handed it, ADR 38)
        self._listen = threading.Event()
        self._ended = False  # the control loop is over: the listener releases what it brings
        # a task the listener's claim brought that the listener's thread runs itself, once
        # another pool thread has taken over the listening (ADR 46); only the listener uses it
        self._run_here: wa.Slot | None = None

    # ------------------------------------------------------------------ public
    def start(self) -> None:
        """Start the worker threads and return."""
        self._begin()
        self._thread = threading.Thread(
            target=self._main, name=f"fairque-{self.config.id}-loop", daemon=True
        )
        self._thread.start()
        # the listener is a job of the pool: the thread that makes a claim runs its first
        # task itself and hands the listening on to another (ADR 46)
        self._pool.submit(self._listen_for_work)

    def request_stop(self) -> None:
        """Ask for a graceful stop and return at once (from any thread; not from a signal
        handler, which :meth:`run` installs with a :class:`SignalLatch` instead)."""
        self._stop_requested.set()
        self._wake.set()
        self._listen.set()  # lets the listener see the stop (it never blocks the shutdown)

    def stop(self, timeout: float | None = None) -> bool:
        """Stop gracefully and wait up to ``timeout`` (default: the shutdown timeout + 5 s).

        True when the worker has stopped. Called from one of this worker's handlers, it asks
        for the stop and returns False at once: the worker stops once that handler returned
        (its result is acknowledged as usual).
        """
        self.request_stop()
        if self._thread is None:
            with self._guard:
                self._loop.stop(time.monotonic())
            self._done.set()
            return True
        if getattr(self._in_handler, "active", False):
            # called by a handler of this worker: the stop cannot end before that handler
            # does, so it is only asked for (a wait would run out the graceful window and
            # drop this handler's own result): not done yet
            return self._done.is_set()
        return self._done.wait(self._stop_wait(timeout))

    def run(self) -> None:
        """Run until stopped; on the main thread SIGTERM/SIGINT trigger a graceful stop
        (a second signal skips the wait for running tasks). The handler only records the
        signal (:class:`SignalLatch`); this thread acts on it within 0.1 s."""
        latch = SignalLatch()
        latch.install()
        try:
            self.start()
            while not self._done.wait(0.1):
                for signum in latch.take():
                    self.on_signal(signum)
        finally:
            if not self._done.is_set():
                self.stop()
            latch.restore()

    def health(self) -> dict[str, Any]:
        """A snapshot: state, sizes, counters, last error and last claim time."""
        out = super().health()
        out["waiting_for_work"] = out["waiting_for_work"] and not self._stop_requested.is_set()
        return out

    def on_signal(self, signum: int) -> None:
        """Act on a stop signal received (not from the signal handler itself: see
        :class:`SignalLatch`): the first asks for a graceful stop, a second skips the wait
        for running tasks."""
        if self._stop_requested.is_set():
            self._force = True
        logger.info("worker %s: signal %d, stopping", self.config.id, signum)
        self.request_stop()

    # ------------------------------------------------------------------ pool side
    def _execute(self, slot: wa.Slot) -> None:
        """Run ``slot``'s task, then each task the loop gives this thread as the one before
        ends (ADR 51)."""
        next_slot: wa.Slot | None = slot
        while next_slot is not None:
            next_slot = self._run_one(next_slot)

    def _run_one(self, slot: wa.Slot) -> wa.Slot | None:
        """Run one task and book its end: the next task for this thread, or None."""
        task = slot.task
        started = time.perf_counter()
        ok = False
        value: Any
        self._in_handler.active = True
        try:
            queue = self._queue_of(task)
            value = queue.plugins.execute(
                task, functools.partial(self._run_task, task), queue=queue.name
            )
            if value is not None:
                encode_result(task.task_id, value, queue.config.max_payload_bytes)
            ok = True
        except BaseException as exc:
            value = exc
        self._in_handler.active = False  # every exception was caught just above
        self._task_ended(slot, ok, value)
        seconds = time.perf_counter() - started
        hand_off = self._hand_off
        if hand_off is None:  # the reference: the loop books the end at its next cycle
            self._completions.put((slot, ok, value, seconds))
            if not self._wake.is_set():
                self._wake.set()
            return None
        next_slot = self._book_end(hand_off, slot, ok, value, seconds)
        if next_slot is not None and self._wake.is_set() and not self._awake.is_set():
            # the loop was woken and has not run yet: let it have the interpreter first (a
            # thread that runs task after task holds the GIL until the interpreter's switch
            # interval forces it out, and the loop's claim would wait that long)
            self._awake.wait(hand_off.yield_seconds)
        return next_slot

    def _cancel(self, slot: wa.Slot) -> None:
        """A thread cannot be cancelled: a timed-out task's thread runs on, its result dropped
        (its place is given back as the loop decides)."""

    # ------------------------------------------------------------------ wake listener
    def _listen_for_work(self) -> None:
        """While the loop is idle, block on the queue's wake signal and wake the loop.

        A thread of its own (a pool thread, one at a time), because a blocking pop holds a
        connection for up to a poll interval; the loop keeps its timers. Errors are the loop's
        to report (it meets the same outage on its next call); here they only pause listening.
        When its claim brought a task it may start (``_run_here``), this thread hands the
        listening to another pool thread and runs that task itself: no thread hand-off between
        the claim's reply and the handler (ADR 46).
        """
        while not self._stop_requested.is_set():
            self._listen.wait()
            if self._stop_requested.is_set():
                return
            woke: bool | Exception
            try:
                woke = self._listen_call()()
            except Exception as exc:  # an outage (or a closed queue): pause, then listen again
                woke = exc
            pause = self._listened(woke)
            own, self._run_here = self._run_here, None
            if own is not None:
                self._pool.submit(self._listen_on)  # the next claim is another thread's
                self._execute(own)
                return
            if pause is not None:
                self._stop_requested.wait(pause)

    def _listen_on(self) -> None:
        """The listening, handed on by a listener that runs a task it claimed: wake the loop
        (it books the task's start in its timers), then listen, with the next claim that
        listener took from the loop already waiting (``hand_next``) if there is one. The loop
        is woken from here, not by that listener, so that the only thread it wakes before its
        handler starts is this one (a woken thread can take the core, and then waits for the
        GIL that listener holds)."""
        self._wake.set()
        if self._handed is not None:
            self._listen.set()
        self._listen_for_work()

    def _claim_for_loop(self) -> bool:
        """See ``_listen_call``: what it brought goes to the loop at once (``health()`` counts
        it from then on); what comes after the loop's end is released here."""
        handed = self._take_hand_out()
        if handed is None:
            return False
        got: object
        try:
            got = self._listener_claim(handed)()
        except Exception as exc:
            got = exc
        slots: list[wa.Slot] = []
        with self._guard:
            booked = not self._ended
            if booked:
                self._loop.listener_claimed(got)
                # while the control thread sleeps, start the tasks from here: the first on
                # this thread (see _listen_for_work), the others on the pool; no thread
                # hand-off and no loop cycle between the claim's reply and a handler (ADR 46).
                # The next claim waits for the listener this thread hands on to (_listen_on)
                slots = self._start_handed(listen=False)
        if slots:
            self._run_here = slots[0]  # this thread runs it (see _listen_for_work)
        for slot in slots[1:]:
            self._pool.submit(slot)
        if booked:
            if not slots:  # else _listen_on wakes it
                self._wake.set()
        elif isinstance(got, list):
            self._release(got)
        elif isinstance(got, Exception):
            raise got
        return False

    def _release(self, tasks: list[Task]) -> None:  # back at the head of their queues
        for task in tasks:
            try:
                self._calls.release(task)
            except Exception as exc:
                self._release_failed(task, exc)

    # ------------------------------------------------------------------ control thread
    def _main(self) -> None:
        loop = self._loop
        completions = self._completions
        clock = time.monotonic
        try:
            while True:
                now = clock()
                with self._guard:
                    if self._stop_requested.is_set():
                        loop.stop(now, force=self._force)
                    while not completions.empty():
                        loop.task_done(*completions.get())
                    action = loop.next_action(now)
                if isinstance(action, wa.Sleep):
                    self._sleep(action)
                elif isinstance(action, wa.Run):
                    for slot in action.slots:
                        self._pool.submit(slot)
                elif isinstance(action, wa.Stopped):
                    break
                else:
                    self._perform(action)
        except BaseException as exc:
            self._crashed(exc)
        finally:
            self._listen.set()  # the listener sees the stop and ends
            with self._guard:
                self._ended = True
                leftover = loop.listener.unbooked()
            self._release(leftover)
            if self._acker is not None:
                self._acker.shutdown(wait=False)
            self._pool.shutdown()
            self._unregister_thread()  # a clean stop: the record goes at once
            self._done.set()

    def _sleep(self, action: wa.Sleep) -> None:
        if not self._stop_requested.is_set():
            if action.claim:
                self._hand_out(action)
            elif self._claiming:
                pass  # the listener only makes the claims the loop hands it
            elif action.listen:
                self._listen.set()
            elif self._listen.is_set():
                self._listen.clear()
        wait = action.until - time.monotonic()
        if wait > 0:
            self._awake.clear()
            self._wake.wait(wait)
        self._wake.clear()  # before the completions are read: a later one sets it again
        self._awake.set()

    def _perform(self, action: wa.Action) -> None:
        """Carry out one action of the loop that is not a sleep or a run: its queue call (its
        outcome reported to the loop), or the callbacks of timed-out tasks."""
        loop = self._loop
        try:
            if isinstance(action, (wa.Expire, wa.CancelRunning)):
                self._no_call(action)
            elif isinstance(action, wa.Claim) and action.acks is not None:
                loop.done(self._claim_and_ack(action, action.acks))
            else:
                loop.done(self._queue_call(action)())
        except Exception as exc:
            loop.failed(exc)

    def _claim_and_ack(self, claim: wa.Claim, ack: wa.Ack) -> tuple[Any, Any]:
        """The ack batch and the claim in one call where the queue makes them one (ADR 40);
        else the ack batch on a helper thread while this thread claims: the two round trips
        (and the decoding of the claimed tasks) overlap."""
        both = self._combined_call(claim)
        if both is not None:
            try:
                return claim_and_acks(both())
            except Exception as exc:
                return claim_and_acks(exc)
        if self._acker is None:
            self._acker = ThreadPoolExecutor(1, thread_name_prefix=f"fairque-{self.config.id}-ack")
        sent: Future[list[bool]] = self._acker.submit(self._queue_call(ack))
        tasks: Any
        flags: Any
        try:
            tasks = self._queue_call(claim)()
        except Exception as exc:
            tasks = exc
        try:
            flags = sent.result()
        except Exception as exc:
            flags = exc
        return tasks, flags
