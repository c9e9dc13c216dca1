"""AsyncWorker: the asyncio twin of :class:`~fairque_core.app.worker.Worker`.

The same control loop (batch claims for the free places, batch acknowledgements, heartbeats,
reaper, backoff on backend errors, graceful stop that releases unstarted claims) runs as one
coroutine; each task runs as an asyncio task. Async handlers are awaited directly; sync
handlers run in a thread (``asyncio.to_thread``). A task past ``task_timeout_seconds`` is
cancelled (``asyncio.wait_for``) and failed with
:class:`~fairque_core.domain.errors.TaskTimeoutError`;
a sync handler's thread cannot be cancelled and runs on, its result dropped.

Plugin hooks are synchronous: ``PluginHost.execute`` wraps the creation of the handler's
coroutine, which is then awaited outside the hook. An execution wrapper that must cover the
awaited run (the tracing plugin's consumer span) sees that coroutine as the hook's result and
returns an instrumented awaitable in its place; whatever the hook returns is awaited here.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from fairque_core.app import worker_parts as wc
from fairque_core.app.config import WorkerConfig
from fairque_core.app.engine_async import AsyncFairQueue
from fairque_core.app.handlers import TaskHandler
from fairque_core.app.messages import encode_result
from fairque_core.domain.errors import BackendError, LeaseLostError, TaskTimeoutError
from fairque_core.domain.models import Task

__all__ = ["AsyncWorker"]

logger = wc.logger


class _Outage(Exception):
    """A backend call failed; the rest of this cycle's backend work is skipped."""


class AsyncWorker:
    """Runs tasks of an :class:`AsyncFairQueue` as asyncio tasks, at most
    ``max_concurrent_tasks`` at once. ``await start()`` / ``await stop()`` / ``await run()``
    / ``health()``, as :class:`~fairque_core.app.worker.Worker`."""

    def __init__(
        self,
        config: WorkerConfig,
        handler: TaskHandler,
        queue: AsyncFairQueue,
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
        runner = getattr(handler, "process_task_async", None)
        self._run_task: Callable[[Task], Awaitable[object]] = (
            runner
            if runner is not None
            else functools.partial(TaskHandler.process_task_async, handler)
        )
        self._stats = wc.Stats()
        self._backoff = wc.Backoff()
        self._state = "new"
        self._force = False
        self._wake: asyncio.Event | None = None
        self._stop_requested: asyncio.Event | None = None
        self._done: asyncio.Event | None = None
        self._main_task: asyncio.Task[None] | None = None
        self._completions: deque[tuple[wc.Slot, bool, Any]] = deque()
        self._held: dict[str, wc.Slot] = {}
        self._buffer: deque[wc.Slot] = deque()
        self._running: dict[str, asyncio.Task[None]] = {}
        self._acks: list[tuple[wc.Slot, object]] = []
        self._fails: list[tuple[wc.Slot, BaseException]] = []
        self._releases: list[wc.Slot] = []
        self._hb_due = 0.0
        self._reap_due = 0.0
        self._room_since: float | None = None
        self._claim_threshold = max(1, (self._cap + prefetch) // 4)
        self._idle_poll = wc.IdlePoll(config.poll_interval_seconds)
        # set while a claim came back short and there is room: the listener task then waits
        # on the queue's wake signal and wakes the loop when it comes (see Worker)
        self._listen: asyncio.Event | None = None
        self._listener: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ public
    async def start(self) -> None:
        """Start the control loop on the running event loop and return."""
        if self._main_task is not None:
            raise RuntimeError("this worker was already started")
        self._wake = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self._done = asyncio.Event()
        self._listen = asyncio.Event()
        self._state = "running"
        self._main_task = asyncio.create_task(self._main(), name=f"fairque-{self.config.id}")
        self._listener = asyncio.create_task(
            self._listen_for_work(), name=f"fairque-{self.config.id}-wake"
        )

    def request_stop(self) -> None:
        """Ask for a graceful stop (call from the event loop's thread)."""
        if self._stop_requested is None or self._wake is None:
            self._state = "stopped"
            return
        if self._stop_requested.is_set():
            self._force = True
        self._stop_requested.set()
        self._wake.set()

    async def stop(self, timeout: float | None = None) -> bool:
        """Stop gracefully; wait up to ``timeout`` (default: shutdown timeout + 5 s)."""
        self.request_stop()
        if self._main_task is None or self._done is None:
            return True
        wait = self.config.graceful_shutdown_timeout + 5.0 if timeout is None else timeout
        try:
            await asyncio.wait_for(self._done.wait(), wait)
        except asyncio.TimeoutError:
            return False
        return True

    async def run(self) -> None:
        """Run until stopped; SIGTERM/SIGINT stop gracefully when on the main thread."""
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, self.request_stop)
                except (NotImplementedError, RuntimeError):
                    continue
                installed.append(sig)
        try:
            await self.start()
            assert self._done is not None
            await self._done.wait()
        finally:
            if self._done is not None and not self._done.is_set():
                await self.stop()
            for sig in installed:
                loop.remove_signal_handler(sig)

    def health(self) -> dict[str, Any]:
        out = self._stats.as_dict()
        executing = sum(1 for t in self._running.values() if not t.done())
        out.update(
            worker_id=self.config.id,
            state=self._state,
            in_flight=len(self._held),
            executing=executing,
            buffered=len(self._buffer),
            stuck_threads=0,
            backing_off=self._backoff.failures > 0,
            waiting_for_work=self._listen is not None
            and self._listen.is_set()
            and self._state == "running",
        )
        return out

    @property
    def state(self) -> str:
        return self._state

    # ------------------------------------------------------------------ task side
    async def _execute(self, slot: wc.Slot) -> None:
        task = slot.task
        started = time.perf_counter()
        ok = False
        value: Any
        try:
            value = await asyncio.wait_for(self._invoke(task), self.config.task_timeout_seconds)
            if value is not None:
                encode_result(task.task_id, value)
            ok = True
        except asyncio.TimeoutError as exc:
            if time.perf_counter() - started < self.config.task_timeout_seconds * 0.99:
                value = exc  # the handler itself raised TimeoutError: an ordinary failure
            else:
                value = self._timed_out(slot)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            value = exc
        slot.run_seconds = time.perf_counter() - started
        if ok:
            wc.safe_callback("on_task_success", self.handler.on_task_success, task, value)
        elif not slot.timed_out:
            wc.safe_callback("on_task_failure", self.handler.on_task_failure, task, value)
        self._completions.append((slot, ok, value))
        assert self._wake is not None
        self._wake.set()

    def _timed_out(self, slot: wc.Slot) -> TaskTimeoutError:
        slot.timed_out = True
        self._stats.timed_out += 1
        logger.warning("worker %s: task %s timed out", self.config.id, slot.task.task_id)
        wc.safe_callback("on_task_timeout", self.handler.on_task_timeout, slot.task)
        return TaskTimeoutError(slot.task.task_id, self.config.task_timeout_seconds)

    async def _invoke(self, task: Task) -> object:
        made = self.queue.plugins.execute(task, lambda: self._run_task(task), queue=self.queue.name)
        if isinstance(made, Awaitable):
            return await made
        return made

    # ------------------------------------------------------------------ wake listener
    async def _listen_for_work(self) -> None:
        """While the loop is idle, wait on the queue's wake signal and wake the loop.

        A task of its own, because a blocking pop holds a connection for up to a poll
        interval; the loop keeps its timers. Errors only pause listening (the loop reports the
        outage on its next call). Cancelled when the loop ends.
        """
        assert self._listen is not None
        assert self._wake is not None
        failures = 0
        while True:
            await self._listen.wait()
            try:
                woke = await self.queue.wait_for_work(self.config.poll_interval_seconds)
            except Exception as exc:  # an outage (or a closed queue): pause, then listen again
                logger.debug("worker %s: wake listener: %s", self.config.id, exc)
                failures += 1
                await asyncio.sleep(min(wc.BACKOFF_CAP_SECONDS, 0.05 * 2**failures))
                continue
            failures = 0
            if woke:
                self._listen.clear()
                self._wake.set()

    # ------------------------------------------------------------------ control loop
    async def _main(self) -> None:
        assert self._stop_requested is not None
        assert self._wake is not None
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
                        await self._final_flush()
                        break
                try:
                    wait = await self._cycle(now, stopping=shutdown_at is not None)
                except Exception as exc:
                    logger.exception("worker %s: control loop error", self.config.id)
                    self._stats.note_error(exc)
                    wait = self._backoff.fail(time.monotonic())
                if shutdown_at is not None:
                    wait = min(wait, max(0.0, shutdown_at - time.monotonic()))
                if wait > 0:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), wait)
        finally:
            if self._listener is not None:
                self._listener.cancel()
            for running in list(self._running.values()):
                running.cancel()
            self._state = "stopped"
            if self._done is not None:
                self._done.set()

    def _drained(self) -> bool:
        busy = any(not t.done() for t in self._running.values())
        return (
            not busy and not self._completions and not (self._acks or self._fails or self._releases)
        )

    async def _final_flush(self) -> None:
        self._collect()
        self._backoff.ok()
        try:
            await self._flush()
        except _Outage:
            logger.warning(
                "worker %s: stopped with unacknowledged tasks (server unreachable); the "
                "reaper will redeliver them when their leases expire",
                self.config.id,
            )

    async def _cycle(self, now: float, *, stopping: bool) -> float:
        assert self._wake is not None
        self._wake.clear()
        self._collect()
        idle = True
        if self._backoff.waiting(now) <= 0:
            try:
                await self._flush()
                await self._maybe_heartbeat(now)
                await self._maybe_reap(now)
                if not stopping:
                    idle = await self._claim(now)
                elif self._listen is not None:
                    self._listen.clear()
                self._backoff.ok()
            except _Outage:
                pass
        self._dispatch()
        return self._next_wait(time.monotonic(), idle=idle, stopping=stopping)

    def _collect(self) -> None:
        while self._completions:
            slot, ok, value = self._completions.popleft()
            task_id = slot.task.task_id
            self._running.pop(task_id, None)
            if slot.lost:
                self._held.pop(task_id, None)
                continue
            if ok:
                self._acks.append((slot, value))
            else:
                self._fails.append((slot, value))

    async def _backend_call(self, call: Awaitable[Any]) -> Any:
        try:
            return await call
        except LeaseLostError:
            raise
        except (BackendError, OSError) as exc:
            self._stats.note_error(exc)
            delay = self._backoff.fail(time.monotonic())
            logger.warning(
                "worker %s: backend error (%s); retrying in %.2f s", self.config.id, exc, delay
            )
            raise _Outage from exc

    async def _flush(self) -> None:
        while self._releases:
            slot = self._releases[0]
            try:
                await self._backend_call(self.queue.release(slot.task))
                self._stats.released += 1
            except LeaseLostError:
                self._stats.lease_lost += 1
            self._releases.pop(0)
            self._held.pop(slot.task.task_id, None)
        if self._acks:
            acks = self._acks
            items = [(slot.task, value) for slot, value in acks]
            seconds = [slot.run_seconds for slot, _ in acks]
            flags = await self._backend_call(self.queue.finish_many(items, run_seconds=seconds))
            self._acks = []
            for (slot, _), ok in zip(acks, flags, strict=True):
                self._held.pop(slot.task.task_id, None)
                if ok:
                    self._stats.processed += 1
                else:
                    self._stats.lease_lost += 1
        while self._fails:
            slot, error = self._fails[0]
            self._stats.failed += 1
            if isinstance(error, wc.POISON_ERRORS):
                self._stats.poisoned += 1
            try:
                state = await self._backend_call(
                    self.queue.fail(slot.task, error, run_seconds=slot.run_seconds)
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

    async def _maybe_heartbeat(self, now: float) -> None:
        if now < self._hb_due:
            return
        self._hb_due = now + self._hb_interval
        live = [s for s in self._held.values() if not (s.lost or s.timed_out)]
        for start in range(0, len(live), wc.HEARTBEAT_BATCH):
            chunk = live[start : start + wc.HEARTBEAT_BATCH]
            renewed = await self._backend_call(
                self.queue.heartbeat_many([slot.task for slot in chunk])
            )
            for slot, task in zip(chunk, renewed, strict=True):
                if task is not None:
                    slot.task = task
                else:
                    wc.book_lease_lost(slot, self._held, self._stats, self.config.id)
        if any(slot.lost for slot in self._buffer):
            self._buffer = deque(slot for slot in self._buffer if not slot.lost)

    async def _maybe_reap(self, now: float) -> None:
        if now < self._reap_due:
            return
        self._reap_due = now + self.config.reaper_interval_seconds
        for _ in range(wc.REAPER_ROUNDS):
            handled = await self._backend_call(self.queue.requeue_expired(wc.REAPER_LIMIT))
            if handled < wc.REAPER_LIMIT:
                break

    def _executing(self) -> int:
        return len(self._running)

    def _room(self) -> int:
        return self._cap + self.prefetch - self._executing() - len(self._buffer)

    def _worth_claiming(self, now: float) -> bool:
        """Claim now, or linger briefly so one claim fills several places (see Worker)."""
        room = self._room()
        if room <= 0:
            self._room_since = None
            return False
        if room >= self._claim_threshold or not self._executing():
            self._room_since = None
            return True
        if self._room_since is None:
            self._room_since = now
        return now - self._room_since >= wc.CLAIM_LINGER_SECONDS

    async def _claim(self, now: float) -> bool:
        assert self._listen is not None
        if not self._worth_claiming(now):
            self._listen.clear()  # no room: leave the signal to idle workers
            return False
        self._room_since = None
        count = wc.claim_size(self.config, self._room())
        tasks: list[Task] = await self._backend_call(
            self.queue.pop_batch(count, self._assigned, steal=self._steal, worker_id=self.config.id)
        )
        self._stats.last_claim_at = time.time()
        now = time.monotonic()
        for task in tasks:
            slot = wc.Slot(task=task, claimed_at=now)
            self._held[task.task_id] = slot
            self._buffer.append(slot)
        self._stats.claimed += len(tasks)
        return wc.after_claim(self._idle_poll, self._listen, got=len(tasks), asked=count)

    def _dispatch(self) -> None:
        now = time.monotonic()
        while self._buffer and self._executing() < self._cap:
            slot = self._buffer.popleft()
            slot.started_at = now
            self._running[slot.task.task_id] = asyncio.create_task(self._execute(slot))

    def _next_wait(self, now: float, *, idle: bool, stopping: bool) -> float:
        if self._completions:
            return 0.0
        backoff = self._backoff.waiting(now)
        if backoff > 0:
            return backoff
        if self._acks or self._fails or self._releases:
            return 0.0
        if self._room() > 0 and not idle and not stopping:
            if self._room_since is None:
                return 0.0
            return max(0.0, self._room_since + wc.CLAIM_LINGER_SECONDS - now)
        # the queue had less than asked: poll again soon after work was found, backing off to
        # poll_interval_seconds while it stays empty (woken early by completions or the signal)
        poll = self._idle_poll.wait if idle else self.config.poll_interval_seconds
        return max(0.0, min(self._hb_due, self._reap_due, now + poll) - now)
