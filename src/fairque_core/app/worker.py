"""Worker: runs tasks from a :class:`~fairque_core.app.engine.FairQueue` on a pool of threads.

One control thread owns every queue call: it claims in batches (as many tasks as there are
free places, plus a ``prefetch`` that adapts to how fast tasks finish), acknowledges finished
tasks in batches (``finish_batch``: one backend call, usually sent alongside the next claim),
extends the leases of everything it holds, runs the reaper, enforces task timeouts and backs
off when the backend is unreachable. Handler code runs on pool threads that never touch the
queue, so a slow handler cannot delay heartbeats and the in-memory backend needs no extra
locking.

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
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from queue import SimpleQueue
from types import FrameType
from typing import Any

from fairque_core.app import worker_actions as wa
from fairque_core.app import worker_loop as wl
from fairque_core.app.config import WorkerConfig
from fairque_core.app.engine import FairQueue
from fairque_core.app.handlers import TaskHandler
from fairque_core.app.messages import encode_result
from fairque_core.app.worker_pacing import listener_pause
from fairque_core.domain.models import Task

__all__ = ["Worker"]

logger = wl.logger


class _Pool:
    """Daemon threads that run jobs; grows to the number of jobs running at once."""

    def __init__(self, run: Callable[[wa.Slot], None], name: str) -> None:
        self._run = run
        self._name = name
        self._jobs: SimpleQueue[wa.Slot | None] = SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._threads = 0

    def submit(self, slot: wa.Slot) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
            else:
                self._threads += 1
                thread = threading.Thread(
                    target=self._loop, name=f"{self._name}-{self._threads}", daemon=True
                )
                thread.start()
        self._jobs.put(slot)

    def _loop(self) -> None:
        while True:
            slot = self._jobs.get()
            if slot is None:
                return
            self._run(slot)
            with self._lock:
                self._idle += 1

    def shutdown(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, 0
            self._threads -= idle
        for _ in range(idle):
            self._jobs.put(None)


class Worker:
    """Claims tasks fairly and runs them with ``handler`` on up to ``max_concurrent_tasks``
    threads. ``start()`` runs it in the background, ``run()`` in the foreground with signal
    handling, ``stop()`` shuts it down gracefully, ``health()`` reports its state.

    ``prefetch`` claims that many tasks beyond the free places, to hide claim latency; they
    are heartbeated while they wait and released at once on stop. None (the default) adapts it
    to how fast tasks finish: deep for fast tasks, none for tasks much slower than a claim
    round trip, and bounded by a fraction of the lease (ADR 30).

    Every decision is the :class:`~fairque_core.app.worker_loop.WorkerLoop`'s; this class only
    carries its actions out on threads.
    """

    def __init__(
        self,
        config: WorkerConfig,
        handler: TaskHandler,
        queue: FairQueue,
        *,
        prefetch: int | None = None,
    ) -> None:
        self._loop = wl.WorkerLoop(
            config, lease_seconds=queue.config.lease_seconds, prefetch=prefetch
        )
        self.config = config
        self.handler = handler
        self.queue = queue
        self.prefetch = prefetch
        self._assigned = list(config.assigned_tenants) or None
        self._steal = list(config.steal_targets) or None
        self._run_task: Callable[[Task], object] = getattr(handler, "run_sync", None) or (
            handler.process_task
        )
        self._wake = threading.Event()
        self._stop_requested = threading.Event()
        self._done = threading.Event()
        self._force = False
        self._thread: threading.Thread | None = None
        self._completions: SimpleQueue[tuple[wa.Slot, bool, Any, float]] = SimpleQueue()
        self._pool = _Pool(self._execute, f"fairque-{config.id}")
        self._acker: ThreadPoolExecutor | None = None
        # set while the loop's last claim came back short and there is room: then the listener
        # thread waits on the queue's wake signal and wakes the loop when it comes
        self._listen = threading.Event()
        self._listener: threading.Thread | None = None

    # ------------------------------------------------------------------ public
    def start(self) -> None:
        """Start the worker threads and return."""
        if self._thread is not None:
            raise RuntimeError("this worker was already started")
        self._loop.start()
        self._thread = threading.Thread(
            target=self._main, name=f"fairque-{self.config.id}-loop", daemon=True
        )
        self._thread.start()
        self._listener = threading.Thread(
            target=self._listen_for_work, name=f"fairque-{self.config.id}-wake", daemon=True
        )
        self._listener.start()

    def request_stop(self) -> None:
        """Ask for a graceful stop and return at once (safe in a signal handler)."""
        self._stop_requested.set()
        self._wake.set()
        self._listen.set()  # lets the listener see the stop (it never blocks the shutdown)

    def stop(self, timeout: float | None = None) -> bool:
        """Stop gracefully and wait up to ``timeout`` (default: the shutdown timeout + 5 s).

        True when the worker has stopped.
        """
        self.request_stop()
        if self._thread is None:
            self._loop.stop(time.monotonic())
            self._done.set()
            return True
        wait = self.config.graceful_shutdown_timeout + 5.0 if timeout is None else timeout
        return self._done.wait(wait)

    def run(self) -> None:
        """Run until stopped; on the main thread SIGTERM/SIGINT trigger a graceful stop
        (a second signal skips the wait for running tasks)."""
        previous: list[tuple[signal.Signals, Any]] = []
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                previous.append((signum, signal.signal(signum, self._on_signal)))
        try:
            self.start()
            while not self._done.wait(0.2):
                pass
        finally:
            if not self._done.is_set():
                self.stop()
            for sig, old in previous:
                signal.signal(sig, old)

    def health(self) -> dict[str, Any]:
        """A snapshot: state, sizes, counters, last error and last claim time."""
        out = self._loop.health(time.monotonic(), time.time())
        out["worker_id"] = self.config.id
        out["waiting_for_work"] = out["waiting_for_work"] and not self._stop_requested.is_set()
        return out

    @property
    def state(self) -> str:
        return self._loop.state

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._stop_requested.is_set():
            self._force = True
        logger.info("worker %s: signal %d, stopping", self.config.id, signum)
        self.request_stop()

    # ------------------------------------------------------------------ pool side
    def _execute(self, slot: wa.Slot) -> None:
        task = slot.task
        started = time.perf_counter()
        ok = False
        value: Any
        try:
            value = self.queue.plugins.execute(
                task, functools.partial(self._run_task, task), queue=self.queue.name
            )
            if value is not None:
                encode_result(task.task_id, value)
            ok = True
        except BaseException as exc:
            value = exc
        if not slot.timed_out:
            if ok:
                wl.safe_callback("on_task_success", self.handler.on_task_success, task, value)
            else:
                wl.safe_callback("on_task_failure", self.handler.on_task_failure, task, value)
        self._completions.put((slot, ok, value, time.perf_counter() - started))
        if not self._wake.is_set():
            self._wake.set()

    # ------------------------------------------------------------------ wake listener
    def _listen_for_work(self) -> None:
        """While the loop is idle, block on the queue's wake signal and wake the loop.

        Its own thread, because a blocking pop holds a connection for up to a poll interval;
        the loop keeps its timers. Errors are the loop's to report (it meets the same outage
        on its next call); here they only pause listening.
        """
        failures = 0
        while not self._stop_requested.is_set():
            self._listen.wait()
            if self._stop_requested.is_set():
                return
            try:
                woke = self.queue.wait_for_work(self.config.poll_interval_seconds)
            except Exception as exc:  # an outage (or a closed queue): pause, then listen again
                logger.debug("worker %s: wake listener: %s", self.config.id, exc)
                failures += 1
                self._stop_requested.wait(listener_pause(failures))
                continue
            failures = 0
            if woke:
                self._listen.clear()
                self._wake.set()

    # ------------------------------------------------------------------ control thread
    def _main(self) -> None:
        loop = self._loop
        completions = self._completions
        clock = time.monotonic
        try:
            while True:
                now = clock()
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
        except BaseException as exc:  # a bug, not an outage: report it, never hang
            logger.exception("worker %s: control loop crashed", self.config.id)
            loop.crashed(exc, time.monotonic())
        finally:
            self._listen.set()  # the listener sees the stop and ends
            if self._acker is not None:
                self._acker.shutdown(wait=False)
            self._pool.shutdown()
            self._done.set()

    def _sleep(self, action: wa.Sleep) -> None:
        if not self._stop_requested.is_set():
            if action.listen:
                self._listen.set()
            elif self._listen.is_set():
                self._listen.clear()
        wait = action.until - time.monotonic()
        if wait > 0:
            self._wake.wait(wait)
        self._wake.clear()  # before the completions are read: a later one sets it again

    def _perform(self, action: wa.Action) -> None:
        """Carry out one queue call of the loop and report its outcome."""
        loop = self._loop
        queue = self.queue
        try:
            if isinstance(action, wa.Claim):
                if action.acks is not None:
                    loop.done(self._claim_and_ack(action, action.acks))
                    return
                loop.done(self._pop(action.count))
            elif isinstance(action, wa.Ack):
                loop.done(queue.finish_batch(action.items, run_seconds=action.run_seconds))
            elif isinstance(action, wa.Fail):
                slot = action.slot
                loop.done(queue.fail(slot.task, action.error, run_seconds=slot.run_seconds))
            elif isinstance(action, wa.Release):
                queue.release(action.slot.task)
                loop.done(None)
            elif isinstance(action, wa.Heartbeat):
                loop.done(queue.heartbeat_batch(action.tasks))
            elif isinstance(action, wa.Reap):
                loop.done(queue.requeue_expired(action.limit))
            elif isinstance(action, wa.Expire):
                for slot in action.slots:
                    wl.safe_callback("on_task_timeout", self.handler.on_task_timeout, slot.task)
            else:  # pragma: no cover - every action is handled above
                raise TypeError(f"unknown worker action {action!r}")
        except Exception as exc:
            loop.failed(exc)

    def _pop(self, count: int) -> list[Task]:
        return self.queue.claim_batch(
            count, self._assigned, steal=self._steal, worker_id=self.config.id
        )

    def _claim_and_ack(self, claim: wa.Claim, ack: wa.Ack) -> tuple[Any, Any]:
        """The ack batch on a helper thread while this thread claims: the two round trips (and
        the decoding of the claimed tasks) overlap."""
        if self._acker is None:
            self._acker = ThreadPoolExecutor(1, thread_name_prefix=f"fairque-{self.config.id}-ack")
        sent: Future[list[bool]] = self._acker.submit(
            self.queue.finish_batch, ack.items, run_seconds=ack.run_seconds
        )
        tasks: Any
        flags: Any
        try:
            tasks = self._pop(claim.count)
        except Exception as exc:
            tasks = exc
        try:
            flags = sent.result()
        except Exception as exc:
            flags = exc
        return tasks, flags
