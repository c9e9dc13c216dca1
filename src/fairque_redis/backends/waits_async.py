"""The asyncio backend's wait for work (ADR 38): ``wait_for_work`` and ``claim_when_ready``,
the BLPOP of the wake and schedule signals with the claim pipelined behind it, and the polling
fallback when the ACL refuses BLPOP (:mod:`fairque_redis.backends.wake_claim`).

A mixin of :class:`~fairque_redis.backends.backend_async.AsyncRedisBackend`, kept apart to keep
modules short; it reaches its host through
:class:`~fairque_redis.backends.host_async.AsyncBackendHost`.
"""

# waits.py (WaitMixin) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fairque_core.domain.errors import BackendPermissionError
from fairque_core.domain.models import Claimed
from fairque_core.domain.validation import check_wait_timeout
from fairque_redis.backends import client_options as co
from fairque_redis.backends import wake_claim as wc
from fairque_redis.backends.errors import translate_errors
from fairque_redis.scripting.calls import Call

if TYPE_CHECKING:  # the host's members, for the type checker only
    from fairque_redis.backends.host_async import AsyncBackendHost as _Host
else:
    _Host = object

__all__ = ["AsyncWaitMixin"]


class AsyncWaitMixin(_Host):
    """wait_for_work and claim_when_ready (see the port)."""

    _polling: bool  # the ACL refused BLPOP: the wait sleeps and LPOPs (wake_claim)

    async def wait_for_work(self, timeout: float) -> bool:
        """Wait for the wake signal or the first scheduled task coming due (see the port): one
        ``next_due`` script call, then a BLPOP on the wake and schedule signals until either
        (LPOP of the wake under 1 ms). A schedule signal (an earlier due) sends it round again."""
        woke, _ = await self._wait(check_wait_timeout(timeout), None)
        return woke

    async def claim_when_ready(
        self,
        timeout: float,
        *,
        worker_id: str = "",
        assigned: Sequence[str] | None = None,
        steal: Sequence[str] | None = None,
        count: int = 1,
        lease_seconds: float | None = None,
    ) -> list[Claimed]:
        """:meth:`wait_for_work`, then :meth:`claim`, with no round trip between them (ADR 38):
        the claim is pipelined behind the BLPOP and runs when it returns (woken or timed out);
        an empty claim after a wake or a schedule signal waits again for the time left (on a
        cluster, or when a claim waits for replicas: each pop, then the claim)."""
        plan = functools.partial(
            self._planner.claim,
            worker_id=worker_id,
            assigned=assigned,
            steal=steal,
            count=count,
            lease_seconds=lease_seconds,
        )
        first, seconds = [plan()], check_wait_timeout(timeout)  # bad arguments raise here
        return (await self._wait(seconds, lambda: first.pop() if first else plan()))[1]

    async def _wait(
        self, timeout: float, plan: Callable[[], Call[list[Claimed]]] | None
    ) -> tuple[bool, list[Claimed]]:
        """The wait for work; with ``plan`` (a claim's builder) each pop carries a claim, until
        one leases tasks or time is up. ``(woken or due, claimed)``."""
        deadline = time.monotonic() + co.blocking_seconds(timeout, self._client)
        wake = self._keys.wake.encode()
        while True:
            # no next_due when the claim follows soon anyway: it moves what has come due
            quick = plan and self._checked and deadline - time.monotonic() < wc.DUE_CHECK_SECONDS
            due_in = None if quick else await self._run(self._planner.next_due())
            if due_in is not None and due_in <= 0:
                return True, [] if plan is None else await self._run(plan())
            left = deadline - time.monotonic()
            block = left if due_in is None else min(left, due_in)
            if self._polling:
                woke = await self._poll_wake(block)
                if woke or time.monotonic() >= deadline:
                    return woke, [] if plan is None else await self._run(plan())
                continue
            got, claimed = await self._pop_and_claim(block, None if plan is None else plan())
            if isinstance(got, wc.Refused):
                self._polling, got = wc.note_polling(got.error), None
                if not claimed:
                    continue
            woke = got is not None and (block < co.MIN_BLOCK_SECONDS or got[0] == wake)
            late = woke if plan is None else time.monotonic() >= deadline
            if claimed or block < co.MIN_BLOCK_SECONDS or late:
                return woke, claimed

    async def _pop_and_claim(self, block: float, call: Call[list[Claimed]] | None) -> Any:
        """The pop of the signals and ``call``'s claim in one round trip (``_wake_claim``)."""
        keys = self._keys
        if call is None or not self._pipelines_claims:  # the pop, then (if any) the claim
            try:
                with translate_errors("wait_for_work", writes=False):
                    if block < co.MIN_BLOCK_SECONDS:
                        popped: Any = await self._client.lpop(keys.wake)
                    else:
                        popped = await self._client.blpop([keys.wake, keys.sched], timeout=block)
            except BackendPermissionError as exc:
                popped = wc.Refused(exc)
            return popped, [] if call is None else await self._run(call)
        script = self._scripts[call.script]
        anchors = self._planner.anchors
        pipe = self._client.pipeline(transaction=False)
        wc.queue_round(pipe, keys, block, script=script, anchors=anchors, args=call.args)
        with translate_errors(call.script, writes=True):
            popped, reply = await pipe.execute(raise_on_error=False)
        if wc.claim_missed(reply):  # NOSCRIPT or no function: it did not run; send it alone
            with translate_errors(call.script, writes=True):
                reply = await script(keys=anchors, args=call.args)
        return wc.read_pop(popped), call.parse(reply)

    async def _poll_wake(self, block: float) -> bool:  # the wait without BLPOP: sleep, LPOP
        await asyncio.sleep(max(0.0, min(block, wc.POLL_SECONDS)))
        try:
            with translate_errors("wait_for_work", writes=False):
                return await self._client.lpop(self._keys.wake) is not None
        except BackendPermissionError:
            return block <= wc.POLL_SECONDS
