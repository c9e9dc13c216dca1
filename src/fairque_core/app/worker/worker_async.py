"""AsyncWorker: the asyncio twin of :class:`~fairque_core.app.worker.worker.Worker`.

Both are drivers of the same :class:`~fairque_core.app.worker.loop.WorkerLoop` (batch claims
for the free places, batch acknowledgements, heartbeats, reaper, backoff on backend errors,
timeouts, graceful stop that releases unstarted claims); here its actions run in one
coroutine and each task runs as an asyncio task. Async handlers are awaited directly; sync
handlers run in a thread. A task past ``task_timeout_seconds`` is cancelled and failed with
:class:`~fairque_core.domain.errors.TaskTimeoutError`; a sync handler's thread cannot be
cancelled and runs on, its result dropped. Such threads count as stuck threads under the same
limit as in ``Worker`` (a place is given back at once while fewer than
``max_concurrent_tasks`` of them run), as far as the worker can see them: it sees the threads
it starts itself, for a handler that keeps ``TaskHandler.process_task_async`` as it is.

Plugin hooks are synchronous: ``PluginHost.execute`` wraps the creation of the handler's
coroutine, which is then awaited outside the hook. An execution wrapper that must cover the
awaited run (the tracing plugin's consumer span) sees that coroutine as the hook's result and
returns an instrumented awaitable in its place; whatever the hook returns is awaited here.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fairque_core.app.engine.messages import encode_result
from fairque_core.app.engine.queue_async import AsyncFairQueue
from fairque_core.app.worker import actions as wa
from fairque_core.app.worker.driver import WorkerDriver, claim_and_acks
from fairque_core.app.worker.handlers import HANDLER_THREADS, TaskHandler
from fairque_core.domain.models import Task

__all__ = ["AsyncWorker"]


class AsyncWorker(WorkerDriver[AsyncFairQueue]):
    """Runs tasks of an :class:`AsyncFairQueue` as asyncio tasks, at most
    ``max_concurrent_tasks`` at once. ``await start()`` / ``await stop()`` / ``await run()``
    / ``health()``, as :class:`~fairque_core.app.worker.worker.Worker` (``prefetch``,
    ``accel``, ``queues`` and ``queue_order`` too: ``prefetch`` None, the default, adapts
    it)."""

    asynchronous = True
    _wake: asyncio.Event
    _listen: asyncio.Event

    def _init_driver(self) -> None:
        handler = self.handler
        # a plain sync handler runs on a thread this worker starts, so that it sees the thread
        # end even after a timeout (stuck threads); any other handler runs as it says
        self._in_thread = type(handler).process_task_async is TaskHandler.process_task_async and (
            not inspect.iscoroutinefunction(handler.process_task)
        )
        self._stop_requested = False
        # the events bind to the event loop that first waits on them: the one of start()
        self._wake = asyncio.Event()
        self._done = asyncio.Event()
        self._main_task: asyncio.Task[None] | None = None
        # by id(slot), not task id: a timed-out attempt and its retry may both run
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._threads: dict[int, bool] = {}  # id(slot) -> its thread was left running
        # set while the loop's last claim came back short: the listener task then waits on the
        # queue's wake signal and wakes the loop when it comes (see Worker)
        self._listen = asyncio.Event()
        self._listener: asyncio.Task[None] | None = None
        self._calling = False  # the control loop waits for a queue call (see _run_one)
        # sync handlers' threads: a pool of the worker's own, as large as its places and the
        # timed-out threads it tolerates (the loop's default pool is min(32, cpus + 4),
        # shared: more places than that never ran, and stuck threads starved new tasks)
        self._threads_pool: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------ public
    async def start(self) -> None:
        """Start the control loop on the running event loop and return."""
        self._begin()
        self._threads_pool = ThreadPoolExecutor(
            max_workers=self._loop.cap + self._loop.stuck_limit,
            thread_name_prefix=f"fairque-{self.config.id}",
        )
        self._main_task = asyncio.create_task(self._main(), name=f"fairque-{self.config.id}")
        self._listener = asyncio.create_task(
            self._listen_for_work(), name=f"fairque-{self.config.id}-wake"
        )

    def request_stop(self) -> None:
        """Ask for a graceful stop (call from the event loop's thread)."""
        if self._main_task is None:  # not started
            with self._guard:
                self._loop.stop(time.monotonic())
            return
        if self._stop_requested:
            self._force = True
        self._stop_requested = True
        self._wake.set()

    async def stop(self, timeout: float | None = None) -> bool:
        """Stop gracefully; wait up to ``timeout`` (default: shutdown timeout + 5 s). True
        when the worker has stopped. Awaited by one of this worker's handlers, it asks for the
        stop and returns False at once: the worker stops once that handler returned."""
        self.request_stop()
        if self._main_task is None:
            return True
        if asyncio.current_task() in self._tasks.values():
            return False  # a handler of ours: waiting for the drain would wait for itself
        try:
            await asyncio.wait_for(self._done.wait(), self._stop_wait(timeout))
        except asyncio.TimeoutError:
            return False
        return True

    def health(self) -> dict[str, Any]:
        """A snapshot: state, sizes, counters, last error and last claim time (as
        ``Worker.health``: not waiting for work once a stop was asked for)."""
        out = super().health()
        out["waiting_for_work"] = out["waiting_for_work"] and not self._stop_requested
        return out

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
            await self._done.wait()
        finally:
            if not self._done.is_set():
                await self.stop()
            for sig in installed:
                loop.remove_signal_handler(sig)

    # ------------------------------------------------------------------ task side
    async def _execute(self, slot: wa.Slot) -> None:
        """Run ``slot``'s task, then each task the loop gives this asyncio task as the one
        before ends (ADR 51). It lets the event loop run first when the control loop has been
        woken (its wake-up waits in the event loop's queue), as a handler that awaits does."""
        HANDLER_THREADS.set(self._threads_pool)  # this asyncio task's context only
        next_slot: wa.Slot | None = await self._run_one(slot)
        while next_slot is not None:
            current = asyncio.current_task()
            if current is not None:  # cancelled as that task's own on a timeout or the stop
                self._tasks[id(next_slot)] = current
            if self._wake.is_set():
                await asyncio.sleep(0)
            next_slot = await self._run_one(next_slot)

    async def _run_one(self, slot: wa.Slot) -> wa.Slot | None:
        """Run one task and book its end: the next task for this asyncio task, or None."""
        task = slot.task
        started = time.perf_counter()
        ok = False
        value: Any = None
        try:
            value = await self._invoke(slot)
            if value is not None:
                limit = self._queue_of(task).config.max_payload_bytes
                encode_result(task.task_id, value, limit)
            ok = True
        except asyncio.CancelledError as exc:
            if not (slot.timed_out or slot.canceled):
                # Python 3.11+ tells a cancellation asked of this asyncio task from a
                # CancelledError the handler raised itself; 3.10 takes every one as the former
                cancelling = getattr(asyncio.current_task(), "cancelling", None)
                if cancelling is None or cancelling():
                    raise  # the worker is going away: it cancelled this asyncio task
                value = exc  # the handler raised it itself: a failure like any other
        except BaseException as exc:
            value = exc
        finally:
            self._tasks.pop(id(slot), None)
        seconds = time.perf_counter() - started
        self._task_ended(slot, ok, value)
        if self._threads.get(id(slot)) is False:
            self._threads[id(slot)] = True  # its thread runs on: it reports when it ends
            return None
        self._threads.pop(id(slot), None)
        # a cancelled task starts no other; nor does one that ends while the control loop's
        # queue call is out: each task run here would put this asyncio task back in the event
        # loop's queue, and every step of that call would wait behind all of them; the loop's
        # cycle after the call books this end and starts the next task, as before ADR 51
        if slot.timed_out or slot.canceled or self._calling or self._hand_off is None:
            self._report(slot, ok, value, seconds)
            return None
        return self._book_end(self._hand_off, slot, ok, value, seconds)

    def _report(self, slot: wa.Slot, ok: bool, value: Any, seconds: float) -> None:
        self._loop.task_done(slot, ok, value, seconds)
        self._wake.set()

    def _cancel(self, slot: wa.Slot) -> None:
        """Cancel a timed-out task's asyncio task (a sync handler's thread runs on)."""
        running = self._tasks.get(id(slot))
        if running is not None:
            running.cancel()

    def _stop_canceled(self, slot: wa.Slot) -> None:
        """A canceled task's coroutine is cancelled (ADR 76); a thread's handler runs on
        until it sees ``ctx.cancelled`` (the asyncio task waiting for it stays)."""
        if not self._in_thread:
            self._cancel(slot)

    async def _invoke(self, slot: wa.Slot) -> object:
        task = slot.task
        run: Callable[[], Awaitable[object]]
        if self._in_thread:
            run = lambda: self._thread_run(slot)  # noqa: E731
        else:
            run = lambda: self.handler.process_task_async(task)  # noqa: E731
        queue = self._queue_of(task)
        made = queue.plugins.execute(task, run, queue=queue.name)
        if isinstance(made, Awaitable):
            return await made
        return made

    async def _thread_run(self, slot: wa.Slot) -> object:
        """``process_task`` on a thread of the worker's pool, as ``to_thread`` would."""
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()

        def body() -> object:
            try:
                return context.run(self.handler.process_task, slot.task)
            finally:
                with contextlib.suppress(RuntimeError):  # the event loop is closed
                    loop.call_soon_threadsafe(self._thread_ended, slot)

        self._threads[id(slot)] = False
        result = await loop.run_in_executor(self._threads_pool, body)
        if inspect.isawaitable(result):
            return await result
        return result

    def _thread_ended(self, slot: wa.Slot) -> None:
        if self._threads.pop(id(slot), None):  # left running after a timeout: now it ended
            self._report(slot, False, None, 0.0)

    # ------------------------------------------------------------------ wake listener
    async def _listen_for_work(self) -> None:
        """While the loop is idle, wait on the queue's wake signal and wake the loop.

        A task of its own, because a blocking pop holds a connection for up to a poll
        interval; the loop keeps its timers. Errors only pause listening (the loop reports the
        outage on its next call). Cancelled when the loop ends.
        """
        while True:
            await self._listen.wait()
            woke: bool | Exception
            try:
                woke = await self._listen_call()()
            except Exception as exc:  # an outage (or a closed queue): pause, then listen again
                woke = exc
            pause = self._listened(woke)
            if pause is not None:
                await asyncio.sleep(pause)

    async def _claim_for_loop(self) -> bool:
        """See ``_listen_call``. Cancelled with the listener when the loop ends: redis-py drops
        the connection, so a claim still waiting behind its pop never runs."""
        handed = self._take_hand_out()
        if handed is None:
            return False
        got: object
        try:
            got = await self._listener_claim(handed)()
        except Exception as exc:
            got = exc
        with self._guard:  # health() counts its tasks from here on (any thread may ask)
            self._loop.listener_claimed(got)
            # while the control loop sleeps, start the tasks from here, and hand this listener
            # its next claim: no wait for the loop to wake and run a cycle first (ADR 46)
            slots = self._start_handed(listen=True)
        for slot in slots:
            self._tasks[id(slot)] = asyncio.create_task(self._execute(slot))
        self._wake.set()
        if isinstance(got, Exception):
            raise got
        return False

    async def _release(self, tasks: list[Task]) -> None:  # back at the head of their queues
        for task in tasks:
            try:
                await self._calls.release(task)
            except Exception as exc:
                self._release_failed(task, exc)

    # ------------------------------------------------------------------ control loop
    async def _main(self) -> None:
        loop = self._loop
        try:
            while True:
                now = time.monotonic()
                with self._guard:
                    if self._stop_requested:
                        loop.stop(now, force=self._force)
                    action = loop.next_action(now)
                if isinstance(action, wa.Sleep):
                    if action.claim and loop.state == "running":
                        self._hand_out(action)
                    elif self._claiming:
                        pass  # the listener only makes the claims the loop hands it
                    elif action.listen and loop.state == "running":
                        self._listen.set()
                    else:
                        self._listen.clear()
                    wait = action.until - time.monotonic()
                    if wait > 0 and not self._wake.is_set():  # (wait_for costs a task)
                        with contextlib.suppress(asyncio.TimeoutError):
                            await asyncio.wait_for(self._wake.wait(), wait)
                    self._wake.clear()
                elif isinstance(action, wa.Run):
                    for slot in action.slots:
                        self._tasks[id(slot)] = asyncio.create_task(self._execute(slot))
                elif isinstance(action, wa.Stopped):
                    break
                else:
                    self._calling = True
                    try:
                        await self._perform(action)
                    finally:
                        self._calling = False
        except asyncio.CancelledError:
            with self._guard:
                loop.crashed(None, time.monotonic())
            raise
        except BaseException as exc:
            self._crashed(exc)
        finally:
            self._listen.clear()
            if self._listener is not None:
                self._listener.cancel()
            for running in list(self._tasks.values()):
                running.cancel()
            with self._guard:
                leftover = loop.listener.unbooked()
            if leftover:  # brought after the loop's last cycle
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._release(leftover))
            if self._threads_pool is not None:  # threads still running (stuck) run on
                self._threads_pool.shutdown(wait=False)
            for registration in self._registrations:  # a clean stop: its records go at once
                with contextlib.suppress(Exception):
                    await asyncio.shield(registration.stop_task())
            self._done.set()

    async def _claim_and_ack(self, claim: wa.Claim, ack: wa.Ack) -> tuple[Any, Any]:
        """The ack batch and the claim in one call where the queue makes them one (ADR 40);
        else both at once, the two round trips overlapping. ``(tasks or error, flags or
        error)``."""
        combined = self._combined_call(claim)
        if combined is not None:
            try:
                return claim_and_acks(await combined())
            except Exception as exc:
                return claim_and_acks(exc)
        both = await asyncio.gather(
            self._queue_call(claim)(), self._queue_call(ack)(), return_exceptions=True
        )
        return both[0], both[1]

    async def _perform(self, action: wa.Action) -> None:
        """Carry out one action of the loop that is not a sleep or a run: its queue call (its
        outcome reported to the loop), or the callbacks and cancellation of timed-out tasks."""
        loop = self._loop
        try:
            if isinstance(action, (wa.Expire, wa.CancelRunning)):
                self._no_call(action)
            elif isinstance(action, wa.Claim) and action.acks is not None:
                loop.done(await self._claim_and_ack(action, action.acks))
            else:
                loop.done(await self._queue_call(action)())
        except Exception as exc:
            loop.failed(exc)
