"""Cancelling an ``await`` of the asyncio face ends it: a ``handle.get()`` of a task nobody
finishes, given up by ``asyncio.wait_for`` after 0.1-5 ms, raises TimeoutError at once.

On Python 3.10 and 3.11 the cancellation could land in redis-py's own ``wait_for`` around a
command's send and be swallowed there (CPython gh-86296); the result wait then went on in
pieces until the task ended, for ever for a task that never does (found by an audit of
cancellations: lost on the first of 60 tries). A piece of the wait no longer starts once its
task was asked to stop, and runs as a task of its own that a cancellation ends at once
(``fairque_core/app/engine/result_waits.py``)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from fairque_core import Task
from fairque_redis import aconnect

pytestmark = pytest.mark.redis


def test_a_given_up_get_ends_at_once(valkey_server: Any) -> None:
    async def scenario() -> None:
        queue = await aconnect(valkey_server.url, queue="cx-" + uuid.uuid4().hex[:8])
        try:
            handle = await queue.push(Task.create("never-finished"))
            for attempt in range(60):
                delay = (0.0001, 0.001, 0.005)[attempt % 3]
                started = time.monotonic()
                runner = asyncio.ensure_future(asyncio.wait_for(handle.get(), timeout=delay))
                done, _ = await asyncio.wait({runner}, timeout=5)
                assert done, f"attempt {attempt}: still waiting after 5 s (delay {delay})"
                with pytest.raises((asyncio.TimeoutError, TimeoutError)):
                    runner.result()
                assert time.monotonic() - started < 5
        finally:
            await queue.close()

    asyncio.run(scenario())
