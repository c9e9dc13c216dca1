"""Worker: runs tasks from a :class:`~fairque_core.app.engine.FairQueue` on a pool of threads.

One control thread owns every queue call: it claims in batches (only as many tasks as there
are free places, plus an optional ``prefetch``), acknowledges finished tasks in batches
(``finish_many``: one backend call), extends the leases of everything it holds, runs the
reaper, enforces task timeouts and backs off when the backend is unreachable. Handler code
runs on pool threads that never touch the queue, so a slow handler cannot delay heartbeats and
the in-memory backend needs no extra locking.

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
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from queue import Empty, SimpleQueue
from types import FrameType
from typing import Any

from fairque_core.app import worker_parts as wc
from fairque_core.app.config import WorkerConfig
from fairque_core.app.engine import FairQueue
from fairque_core.app.handlers import TaskHandler
from fairque_core.app.messages import encode_result
from fairque_core.domain.errors import BackendError, LeaseLostError, TaskTimeoutError
from fairque_core.domain.models import Task

__all__ = ["Worker"]

logger = wc.logger


class _Outage(Exception):
    """A backend call failed; the rest of this cycle's backend work is skipped."""


class _Pool:
    """Daemon threads that run jobs; grows to the number of jobs running at once."""

    def __init__(self, run: Callable[[wc.Slot], None], name: str) -> None:
        self._run = run
        self._name = name
        self._jobs: SimpleQueue[wc.Slot | None] = SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._threads = 0

    def submit(self, slot: wc.Slot) -> None:
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
    are heartbeated while they wait and released at once on stop.
    """

    def __init__(
        self,
        config: WorkerConfig,
        handler: TaskHandler,
        queue: FairQueue,
        *,
        prefetch: int = 0,
    ) -> None:
        wc.check_worker_config(config)
        if prefetch < 0:
            raise ValueError("prefetch must be >= 0")
        self.config = config
        self.handler = handler
        self.queue = queue
        self.prefetch = prefetch
        self._cap = config.max_concurrent_tasks
        self._assigned = list(config.assigned_users) or None
        self._steal = list(config.steal_targets) or None
        self._hb_interval = wc.heartbeat_interval(config, queue.config.lease_seconds)
        self._run_task: Callable[[Task], object] = getattr(handler, "run_sync", None) or (
            handler.process_task
        )
        self._stats = wc.Stats()
        self._backoff = wc.Backoff()
        self._wake = threading.Event()
        self._stop_requested = threading.Event()
        self._done = threading.Event()
        self._force = False
        self._state = "new"
        self._thread: threading.Thread | None = None
        self._completions: SimpleQueue[tuple[wc.Slot, bool, Any]] = SimpleQueue()
        self._pool = _Pool(self._execute, f"fairque-{config.id}")
        # control-thread state
        self._held: dict[str, wc.Slot] = {}
        self._buffer: deque[wc.Slot] = deque()
        self._running: dict[str, wc.Slot] = {}
        self._executing = 0
        self._zombies = 0
        self._acks: list[tuple[wc.Slot, object]] = []
        self._fails: list[tuple[wc.Slot, BaseException]] = []
        self._releases: list[wc.Slot] = []
        self._hb_due = 0.0
        self._reap_due = 0.0
        self._room_since: float | None = None
        self._claim_threshold = max(1, (self._cap + prefetch) // 4)
        self._idle_poll = wc.IdlePoll(config.poll_interval_seconds)
        self._acker: ThreadPoolExecutor | None = None
        # set by the control loop while a claim came back short and there is room: then the
        # listener thread waits on the queue's wake signal and wakes the loop when it comes
        self._listen = threading.Event()
        self._listener: threading.Thread | None = None

    # ------------------------------------------------------------------ public
    def start(self) -> None:
        """Start the worker threads and return."""
        if self._thread is not None:
            raise RuntimeError("this worker was already started")
        self._state = "running"
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
            self._state = "stopped"
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
        out = self._stats.as_dict()
        out.update(
            worker_id=self.config.id,
            state=self._state,
            in_flight=len(self._held),
            executing=self._executing,
            buffered=len(self._buffer),
            stuck_threads=self._zombies,
            backing_off=self._backoff.failures > 0,
            waiting_for_work=self._listen.is_set() and not self._stop_requested.is_set(),
        )
        return out

    @property
    def state(self) -> str:
        return self._state

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._stop_requested.is_set():
            self._force = True
        logger.info("worker %s: signal %d, stopping", self.config.id, signum)
        self.request_stop()

    # ------------------------------------------------------------------ pool side
    def _execute(self, slot: wc.Slot) -> None:
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
        slot.run_seconds = time.perf_counter() - started
        if not slot.timed_out:
            if ok:
                wc.safe_callback("on_task_success", self.handler.on_task_success, task, value)
            else:
                wc.safe_callback("on_task_failure", self.handler.on_task_failure, task, value)
        self._completions.put((slot, ok, value))
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
                self._stop_requested.wait(min(wc.BACKOFF_CAP_SECONDS, 0.05 * 2**failures))
                continue
            failures = 0
            if woke:
                self._listen.clear()
                self._wake.set()

    # ------------------------------------------------------------------ control loop
    def _main(self) -> None:
        shutdown_at: float | None = None
        try:
            while True:
                now = time.monotonic()
                if self._stop_requested.is_set() and shutdown_at is None:
                    self._state = "stopping"
                    shutdown_at = now + self.config.graceful_shutdown_timeout
                    self._releases.extend(self._buffer)
                    self._buffer.clear()
                if shutdown_at is not None:
                    if self._force:
                        shutdown_at = now
                    if self._drained() or now >= shutdown_at:
                        self._final_flush()
                        break
                try:
                    wait = self._cycle(now, stopping=shutdown_at is not None)
                except Exception as exc:  # a bug or a plugin error: report, back off, go on
                    logger.exception("worker %s: control loop error", self.config.id)
                    self._stats.note_error(exc)
                    wait = self._backoff.fail(time.monotonic())
                if shutdown_at is not None:
                    wait = min(wait, max(0.0, shutdown_at - time.monotonic()))
                if wait > 0:
                    self._wake.wait(wait)
        except BaseException as exc:  # a bug, not an outage: report it, never hang
            logger.exception("worker %s: control loop crashed", self.config.id)
            self._stats.note_error(exc)
        finally:
            self._listen.set()  # the listener sees the stop and ends
            if self._acker is not None:
                self._acker.shutdown(wait=False)
            self._pool.shutdown()
            self._state = "stopped"
            self._done.set()

    def _drained(self) -> bool:
        return not self._executing and not self._acks and not self._fails and not self._releases

    def _final_flush(self) -> None:
        self._collect(time.monotonic())
        if self._backoff.failures:
            self._backoff.ok()  # one last try, the process may be about to exit
        try:
            self._flush()
        except _Outage:
            logger.warning(
                "worker %s: stopped with %d unacknowledged tasks (server unreachable); "
                "their leases will expire and the reaper will redeliver them",
                self.config.id,
                len(self._acks) + len(self._fails) + len(self._releases),
            )

    def _cycle(self, now: float, *, stopping: bool) -> float:
        """One pass of the control loop; returns how long to sleep (woken early by events)."""
        self._wake.clear()
        self._collect(now)
        self._check_timeouts(now)
        idle = True
        if self._backoff.waiting(now) <= 0:
            try:
                claim = not stopping and self._worth_claiming(now)
                if claim and self._acks and now < self._hb_due and now < self._reap_due:
                    idle = self._flush_and_claim(now)
                else:
                    self._flush()
                    self._maybe_heartbeat(now)
                    self._maybe_reap(now)
                    idle = self._claim(now) if claim else False
                if not claim and not stopping:
                    self._listen.clear()  # no room: leave the signal to idle workers
                self._backoff.ok()
            except _Outage:
                pass
        self._dispatch(time.monotonic())
        return self._next_wait(time.monotonic(), idle=idle, stopping=stopping)

    def _collect(self, now: float) -> None:
        while True:
            try:
                slot, ok, value = self._completions.get_nowait()
            except Empty:
                return
            task_id = slot.task.task_id
            self._running.pop(task_id, None)
            if slot.zombie:
                self._zombies -= 1
            else:
                self._executing -= 1
            if slot.timed_out:
                continue
            if slot.lost:
                self._held.pop(task_id, None)
                continue
            if ok:
                self._acks.append((slot, value))
            else:
                self._fails.append((slot, value))

    def _check_timeouts(self, now: float) -> None:
        limit = self.config.task_timeout_seconds
        for slot in list(self._running.values()):
            if slot.timed_out or slot.started_at is None or now - slot.started_at < limit:
                continue
            slot.timed_out = True
            self._stats.timed_out += 1
            logger.warning("worker %s: task %s timed out", self.config.id, slot.task.task_id)
            wc.safe_callback("on_task_timeout", self.handler.on_task_timeout, slot.task)
            if self._zombies < self._cap:
                slot.zombie = True
                self._zombies += 1
                self._executing -= 1
            slot.run_seconds = now - slot.started_at
            if slot.lost:
                self._held.pop(slot.task.task_id, None)
            else:
                self._fails.append((slot, TaskTimeoutError(slot.task.task_id, limit)))

    def _backend_call(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except LeaseLostError:
            raise
        except BackendError as exc:
            self._outage(exc)
        except OSError as exc:  # a backend that lets a socket error through
            self._outage(exc)

    def _outage(self, exc: BaseException) -> None:
        self._stats.note_error(exc)
        delay = self._backoff.fail(time.monotonic())
        logger.warning(
            "worker %s: backend error (%s); retrying in %.2f s", self.config.id, exc, delay
        )
        raise _Outage from exc

    def _flush(self) -> None:
        self._flush_releases()
        if self._acks:
            acks = self._acks
            flags = self._backend_call(functools.partial(self._finish, acks))
            self._acks = []
            self._settle_acks(acks, flags)
        self._flush_fails()

    def _flush_and_claim(self, now: float) -> bool:
        """Releases and failures, then the batch of acks on a helper thread while this thread
        claims: the two round trips (and the decoding of the claimed tasks) overlap."""
        self._flush_releases()
        self._flush_fails()
        acks, self._acks = self._acks, []
        if self._acker is None:
            self._acker = ThreadPoolExecutor(1, thread_name_prefix=f"fairque-{self.config.id}-ack")
        sent: Future[list[bool]] = self._acker.submit(self._finish, acks)
        try:
            return self._claim(now)
        finally:
            try:
                flags = self._backend_call(sent.result)
            except BaseException:
                self._acks[:0] = acks  # kept for the next flush, as in _flush
                raise
            self._settle_acks(acks, flags)

    def _finish(self, acks: list[tuple[wc.Slot, object]]) -> list[bool]:
        items = [(slot.task, value) for slot, value in acks]
        seconds = [slot.run_seconds for slot, _ in acks]
        return self.queue.finish_many(items, run_seconds=seconds)

    def _settle_acks(self, acks: list[tuple[wc.Slot, object]], flags: list[bool]) -> None:
        for (slot, _), ok in zip(acks, flags, strict=True):
            self._held.pop(slot.task.task_id, None)
            if ok:
                self._stats.processed += 1
            else:
                self._stats.lease_lost += 1
                logger.warning(
                    "worker %s: lease on %s lost before finish; its result is dropped",
                    self.config.id,
                    slot.task.task_id,
                )

    def _flush_releases(self) -> None:
        while self._releases:
            slot = self._releases[0]
            try:
                self._backend_call(functools.partial(self.queue.release, slot.task))
                self._stats.released += 1
            except LeaseLostError:
                self._stats.lease_lost += 1
            self._releases.pop(0)
            self._held.pop(slot.task.task_id, None)

    def _flush_fails(self) -> None:
        while self._fails:
            slot, error = self._fails[0]
            self._stats.failed += 1
            if isinstance(error, wc.POISON_ERRORS):
                self._stats.poisoned += 1
            try:
                state = self._backend_call(
                    functools.partial(
                        self.queue.fail, slot.task, error, run_seconds=slot.run_seconds
                    )
                )
            except LeaseLostError:
                self._stats.lease_lost += 1
            else:
                if str(state) == "scheduled":
                    self._stats.retried += 1
                else:
                    self._stats.dead += 1
            self._fails.pop(0)
            self._held.pop(slot.task.task_id, None)

    def _maybe_heartbeat(self, now: float) -> None:
        if now < self._hb_due:
            return
        self._hb_due = now + self._hb_interval
        live = [s for s in self._held.values() if not (s.lost or s.timed_out)]
        for start in range(0, len(live), wc.HEARTBEAT_BATCH):
            chunk = live[start : start + wc.HEARTBEAT_BATCH]
            renewed = self._backend_call(
                functools.partial(self.queue.heartbeat_many, [slot.task for slot in chunk])
            )
            for slot, task in zip(chunk, renewed, strict=True):
                if task is not None:
                    slot.task = task
                else:
                    wc.book_lease_lost(slot, self._held, self._stats, self.config.id)
        if any(slot.lost for slot in self._buffer):
            self._buffer = deque(slot for slot in self._buffer if not slot.lost)

    def _maybe_reap(self, now: float) -> None:
        if now < self._reap_due:
            return
        self._reap_due = now + self.config.reaper_interval_seconds
        for _ in range(wc.REAPER_ROUNDS):
            handled = self._backend_call(
                functools.partial(self.queue.requeue_expired, wc.REAPER_LIMIT)
            )
            if handled < wc.REAPER_LIMIT:
                break

    def _room(self) -> int:
        return self._cap + self.prefetch - self._executing - len(self._buffer)

    def _worth_claiming(self, now: float) -> bool:
        """Claim now, or linger a moment so that one claim fills several places?

        While tasks are running, places free up one by one; claiming for each alone would cost
        a round trip per task. A claim waits until a quarter of the places are free, or at
        most ``CLAIM_LINGER_SECONDS``, whichever comes first.
        """
        room = self._room()
        if room <= 0:
            self._room_since = None
            return False
        if room >= self._claim_threshold or not self._executing:
            self._room_since = None
            return True
        if self._room_since is None:
            self._room_since = now
        return now - self._room_since >= wc.CLAIM_LINGER_SECONDS

    def _claim(self, now: float) -> bool:
        """Claim for the free places (the caller checked ``_worth_claiming``); True when the
        queue had fewer tasks than asked."""
        self._room_since = None
        count = wc.claim_size(self.config, self._room())
        tasks: list[Task] = self._backend_call(
            functools.partial(
                self.queue.pop_batch,
                count,
                self._assigned,
                steal=self._steal,
                worker_id=self.config.id,
            )
        )
        self._stats.last_claim_at = time.time()
        now = time.monotonic()
        for task in tasks:
            slot = wc.Slot(task=task, claimed_at=now)
            self._held[task.task_id] = slot
            self._buffer.append(slot)
        self._stats.claimed += len(tasks)
        return wc.after_claim(self._idle_poll, self._listen, got=len(tasks), asked=count)

    def _dispatch(self, now: float) -> None:
        while self._buffer and self._executing < self._cap:
            slot = self._buffer.popleft()
            slot.started_at = now
            self._executing += 1
            self._running[slot.task.task_id] = slot
            self._pool.submit(slot)

    def _next_wait(self, now: float, *, idle: bool, stopping: bool) -> float:
        if not self._completions.empty():
            return 0.0
        backoff = self._backoff.waiting(now)
        if backoff > 0:
            deadlines = [now + backoff]
        else:
            if self._acks or self._fails or self._releases:
                return 0.0
            if self._room() > 0 and not idle and not stopping:
                if self._room_since is None:
                    return 0.0  # the queue had work and there is room: claim again at once
                # lingering for more room (woken early by completions)
                return max(0.0, self._room_since + wc.CLAIM_LINGER_SECONDS - now)
            # the queue had less than asked: poll again soon after work was found, backing
            # off to poll_interval_seconds while it stays empty (wakes early on completions)
            poll = self._idle_poll.wait if idle else self.config.poll_interval_seconds
            deadlines = [self._hb_due, self._reap_due, now + poll]
        limit = self.config.task_timeout_seconds
        for slot in self._running.values():
            if not slot.timed_out and slot.started_at is not None:
                deadlines.append(slot.started_at + limit)
        return max(0.0, min(deadlines) - now)
