"""``fairque worker --processes N``: a supervisor process over N worker processes.

The supervisor starts N children (``python -m fairque_cli worker ...`` with the same options,
each in a session of its own so that a terminal's Ctrl-C reaches only the supervisor) and:

* restarts a child that dies (a crash, ``kill -9``, a non-zero exit) after a backoff that
  doubles with each quick death of that slot (1 s, 2 s, 4 s ... at most 30 s; a child that
  ran 60 s starts the count again); a child that exits 0 (``--burst``, ``--max-seconds``) is
  done and not restarted, and so is one that exits 2 (a usage error: a restart would meet it
  again), which makes the supervisor's status 1; a child that exits with
  :data:`TERMINATED` ended itself for a ``cancel(..., terminate=True)`` of the task it ran
  (ADR 76): it is replaced at once, with no backoff;
* forwards SIGTERM and SIGINT to every child: the first asks each for its graceful stop, a
  second one makes them stop at once, as with a single worker;
* exits when every child has exited: 0 when each ended cleanly or by the stop it was asked
  for, 1 otherwise.

A task held by a child that died is not lost: its lease expires and another worker's reaper
gives it back to the queue (at-least-once delivery).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

import attrs

from fairque_core.app.worker.signal_latch import SignalLatch

__all__ = ["CHILD_ENV", "TERMINATED", "Supervisor", "child_args", "run_supervised"]

log = logging.getLogger("fairque.supervisor")

BACKOFF_FIRST = 1.0
BACKOFF_MAX = 30.0
#: A child that lived this long resets its slot's backoff.
HEALTHY_AFTER = 60.0
#: A child's exit status for a usage error (argparse's): it is not restarted.
USAGE_ERROR = 2
#: A child's exit status when it ended itself for a terminating cancel (ADR 76): replaced at once.
TERMINATED = 75
#: Set in each child's environment: the child ends itself for a terminating cancel.
CHILD_ENV = "FAIRQUE_SUPERVISED_CHILD"


@attrs.define
class _Slot:
    index: int
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    quick_deaths: int = 0
    restart_at: float | None = None
    done: bool = False
    clean: bool = True


class Supervisor:
    """Runs ``argv_for(k)`` for k in 0..n-1 (full command lines) and keeps them running."""

    def __init__(
        self,
        n: int,
        argv_for: Callable[[int], Sequence[str]],
        *,
        env: dict[str, str] | None = None,
        backoff_first: float = BACKOFF_FIRST,
        backoff_max: float = BACKOFF_MAX,
    ) -> None:
        self._argv_for = argv_for
        self._env = env
        self._slots = [_Slot(k) for k in range(n)]
        self._backoff = (backoff_first, backoff_max)
        self._stopping = False
        self._latch = SignalLatch()

    @property
    def pids(self) -> list[int]:
        """The pids of the children running now."""
        return [s.process.pid for s in self._slots if s.process and s.process.poll() is None]

    def _start(self, slot: _Slot) -> None:
        slot.process = subprocess.Popen(
            list(self._argv_for(slot.index)), env=self._env, start_new_session=True
        )
        slot.started = time.monotonic()
        slot.restart_at = None
        log.info("supervisor: started worker process %d (pid %d)", slot.index, slot.process.pid)

    def _on_signal(self, signum: int) -> None:
        """Pass a stop signal on to the children (taken from the latch by :meth:`run`)."""
        self._stopping = True
        for slot in self._slots:
            if slot.process is not None and slot.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):  # exited in between
                    slot.process.send_signal(signum)

    def _reap(self, slot: _Slot, now: float) -> None:
        assert slot.process is not None
        code = slot.process.returncode
        if self._stopping or code == 0:
            slot.done = True
            slot.clean = slot.clean and (code == 0 or self._stopping)
            log.info("supervisor: worker process %d exited (%s)", slot.index, code)
            return
        if code == USAGE_ERROR:
            slot.done = True
            slot.clean = False
            log.error(
                "supervisor: worker process %d refused its arguments (exit 2): not restarted",
                slot.index,
            )
            return
        lived = now - slot.started
        if code == TERMINATED:
            log.info("supervisor: worker process %d ended for a canceled task", slot.index)
            slot.process = None
            slot.restart_at = now
            return
        slot.quick_deaths = 1 if lived >= HEALTHY_AFTER else slot.quick_deaths + 1
        first, most = self._backoff
        delay = min(most, first * 2 ** (slot.quick_deaths - 1))
        slot.restart_at = now + delay
        slot.process = None
        log.warning(
            "supervisor: worker process %d died (exit %s after %.1f s); restarting in %.1f s",
            slot.index,
            code,
            lived,
            delay,
        )

    def run(self) -> int:
        """Start the children and supervise them until all have exited; the exit status."""
        # the handler only records a signal (see SignalLatch); the loop passes it on
        self._latch.install()
        try:
            for slot in self._slots:
                self._start(slot)
            while not all(s.done for s in self._slots):
                for signum in self._latch.take():
                    self._on_signal(signum)
                now = time.monotonic()
                for slot in self._slots:
                    if slot.done:
                        continue
                    if slot.process is None:
                        if self._stopping:
                            slot.done = True
                        elif slot.restart_at is not None and now >= slot.restart_at:
                            self._start(slot)
                    elif slot.process.poll() is not None:
                        self._reap(slot, now)
                time.sleep(0.1)
        finally:
            self._latch.restore()
        return 0 if all(s.clean for s in self._slots) else 1


def child_args(args: argparse.Namespace, index: int) -> list[str]:
    """The ``fairque`` arguments of child ``index``: the supervisor's own options, one process
    each. An ``--id`` gets the suffix ``-<index>``; a ``--metrics-port`` P becomes P+index
    (each child serves its own /metrics, /healthz and /readyz)."""
    out = ["worker", "--handler", args.handler]
    for flag, value in (
        ("--url", getattr(args, "url", None)),
        ("--config", getattr(args, "config", None)),
        ("--queue-order", getattr(args, "queue_order", None)),
        ("--id", f"{args.id}-{index}" if args.id else None),
        ("--concurrency", args.concurrency),
        ("--metrics-port", args.metrics_port + index if args.metrics_port else None),
        ("--metrics-host", getattr(args, "metrics_host", None) if args.metrics_port else None),
        ("--max-seconds", args.max_seconds),
        ("--status-every", args.status_every),
        ("--log-level", args.log_level),
        ("--log-format", args.log_format),
    ):
        if value is not None:
            out += [flag, str(value)]
    queues = getattr(args, "queues", None) or ([args.queue] if getattr(args, "queue", None) else [])
    for spec in queues:  # every queue served, with its weight (ADR 69)
        out += ["--queue", spec]
    for tenant in args.tenant or ():
        out += ["--tenant", tenant]
    if getattr(args, "cluster", False):
        out.append("--cluster")
    if args.burst:
        out.append("--burst")
    return out


def run_supervised(args: argparse.Namespace) -> int:
    """``fairque worker --processes N``: N children under a :class:`Supervisor`."""
    n = int(args.processes)
    log.info("supervisor (pid %d): %d worker processes", os.getpid(), n)
    return Supervisor(
        n,
        lambda k: [sys.executable, "-m", "fairque_cli", *child_args(args, k)],
        env={**os.environ, CHILD_ENV: "1"},
    ).run()
