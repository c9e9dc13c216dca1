"""R11 for Redis Functions (ADR 41), ``FUNCTION FLUSH`` under load: the server forgets
fairque's function library while work flows.

Three producer threads (one shared FairQueue, single pushes and batches of 5) and a worker
process (``chaos_worker.py``, 8 handler threads) run their scripts as functions (the default)
while the test flushes every function library twice a second for 6 s, on Valkey 9 and Redis 7.
A reload is one ``FUNCTION LOAD`` (``cmdstat_function|load``); the reading and the flush run in
one MULTI/EXEC with ``FUNCTION LIST`` of this build's library, so each interval between two
flushes is counted exactly. The run is test_r11_script_flush.py's (``flush_under_load``) with
:data:`FUNCTIONS` for what it flushes, reads and judges.

Pass: no exception reaches a producer or the worker (its handler never fails, its backend
records no error); ``lost = 0`` after a drain; in every interval at most one load per client
(the producers' backend and the worker's: 2), however many threads meet ``Function not
found`` at once; the flushes bit (loads >= flushes); invariants hold. ``CLIENT PAUSE`` makes
eight callers meet the missing library together: one ``FUNCTION LOAD``, threads and asyncio
tasks alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fairque_redis.scripting.function_library import LIBRARY

from ._r11 import RUNS, Herd, eight_callers_load_once
from .test_r11_script_flush import FIXTURES, KINDS, Flushing, Intervals, flush_under_load

pytestmark = [pytest.mark.chaos, pytest.mark.redis]

CLIENTS = 2  # the producers' backend and the worker process's


def reading(raw: Any, *, flush: bool) -> tuple[int, bool]:
    """``(FUNCTION LOADs so far, this build's library loaded)``, then a FUNCTION FLUSH."""
    pipe = raw.pipeline(transaction=True)
    pipe.info("commandstats")
    pipe.function_list(library=LIBRARY.name)
    if flush:
        pipe.function_flush()
    stats, listed, *_ = pipe.execute()
    return int(stats.get("cmdstat_function|load", {}).get("calls", 0)), bool(listed)


def _function_intervals(intervals: Intervals, flushes: int) -> None:
    """At most one load per client in each interval, the flushes bit and were healed."""
    assert all(n <= CLIENTS for n, _ in intervals), intervals
    assert sum(n for n, _ in intervals) >= flushes  # the flushes bit, and were healed
    assert all(listed for n, listed in intervals if n), intervals


FUNCTIONS = Flushing("R11 functions", "", "r11f", 0.5, reading, _function_intervals)


@pytest.mark.timeout(90)
# Redis 7 in the slow run only: the same client code meets the same reply on both servers;
# the quick tests below still load the library on Redis 7
@pytest.mark.parametrize("kind", ["valkey", pytest.param("redis7", marks=pytest.mark.slow)])
def test_r11_function_flush_under_load(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = str(request.getfixturevalue(FIXTURES[kind]).url)
    flush_under_load(kind, url, tmp_path, seconds=6.0, flushing=FUNCTIONS)


HERD = Herd(
    label="R11 functions herd",
    missing="a missing library",
    load="FUNCTION LOAD",
    url_suffix="",
    queue="r11f-herd",
    forget=lambda raw: raw.function_flush(),
    loads=lambda raw: reading(raw, flush=False)[0],
)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("callers", sorted(RUNS))
@pytest.mark.parametrize("kind", KINDS)
def test_eight_callers_meeting_a_missing_library_load_it_once(
    kind: str, callers: str, request: pytest.FixtureRequest
) -> None:
    # every FCALL waits behind CLIENT PAUSE, so all eight meet the missing library at once
    url = str(request.getfixturevalue(FIXTURES[kind]).url)
    eight_callers_load_once(kind, url, HERD, callers)
