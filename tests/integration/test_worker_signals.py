"""Two stop signals close together stop a worker; they never hang it.

``Worker.run()`` (and ``fairque worker``, and the supervisor) set Events in their signal
handlers. A second SIGTERM that landed inside the first handler's ``Event.set()`` ran the
handler again there, and its ``Event.set()`` waited for the lock its own thread held: the
worker hung for good (an audit saw 2 hangs in 36 trials; ``timeout`` or ``docker stop`` around
``uv run`` sends the signal twice, a moment apart). Now the handlers only record the signal
(``SignalLatch``) and the main thread acts on it.

Each trial below runs an idle ``Worker.run()`` on the main thread of a child process, and this
process sends it two SIGTERMs with a gap of 0 to 0.2 ms; the child must finish every trial.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from fairque_core.app.worker.signal_latch import SignalLatch

TRIALS = 60
GAPS = (0.0, 0.00005, 0.0001, 0.0002)  # seconds between the two signals

CHILD = textwrap.dedent(
    f"""
    import signal
    import sys
    import threading
    import time
    from fairque_core import FairQueue, InMemoryBackend, TaskHandler, Worker, WorkerConfig

    class Idle(TaskHandler):
        def process_task(self, task):
            return None

    def announce(n):
        # "ready" once run() has installed its SIGTERM handler (the event the signals need;
        # run() puts the default back when it ends, so each trial waits for its own install)
        while signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            time.sleep(0.001)
        print("ready", n, flush=True)

    for n in range({TRIALS}):
        queue = FairQueue(InMemoryBackend(queue=f"sig{{n}}"))
        worker = Worker(WorkerConfig(id=f"w{{n}}", poll_interval_seconds=0.05), Idle(), queue)
        threading.Thread(target=announce, args=(n,), daemon=True).start()
        worker.run()
        assert worker.health()["state"] == "stopped"
        print("stopped", n, flush=True)
    """
)


def _two_signals(pid: int, gap: float) -> None:
    os.kill(pid, signal.SIGTERM)
    end = time.perf_counter() + gap
    while time.perf_counter() < end:
        pass
    os.kill(pid, signal.SIGTERM)


@pytest.mark.timeout(120)
def test_two_sigterms_close_together_stop_the_worker_every_time() -> None:
    """The signals come from this process, as from ``timeout`` or uv: a child's own threads
    cannot interleave signals with its main thread's handler (they share its GIL)."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    lines: queue.SimpleQueue[str] = queue.SimpleQueue()
    threading.Thread(target=lambda: [lines.put(x) for x in child.stdout], daemon=True).start()
    stopped = 0
    try:
        for n in range(TRIALS):
            # "ready" comes once run() installed its handlers (no wall-clock margin)
            assert lines.get(timeout=60).split() == ["ready", str(n)]
            _two_signals(child.pid, GAPS[n % len(GAPS)])
            try:
                line = lines.get(timeout=30)
            except queue.Empty:
                pytest.fail(f"a worker hung after two SIGTERMs (trial {n}, {stopped} stopped)")
            assert line.split() == ["stopped", str(n)]
            stopped += 1
    finally:
        child.kill()
        child.wait()
    assert stopped == TRIALS


def test_the_latch_records_signals_for_the_thread_that_takes_them() -> None:
    latch = SignalLatch()
    assert latch.install([signal.SIGUSR1])
    try:
        assert latch.take() == []
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert latch.take() == [signal.SIGUSR1, signal.SIGUSR1]
        assert latch.take() == []
        assert latch.received == 2
    finally:
        latch.restore()
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
