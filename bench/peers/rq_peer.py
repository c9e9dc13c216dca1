"""rq in the comparison harness (bench/peers/_common.py).

The worker is ``SimpleWorker`` (jobs run in the worker's process) in a thread of this process,
with job timeouts on a timer thread instead of SIGALRM and per-job logging at WARNING. rq's
default ``Worker`` forks a process per job, which is far slower for no-op jobs; so rq's figures
here flatter rq's defaults. Bulk: ``Queue.enqueue_many`` (one pipeline per 1,000 jobs).
One process has no concurrency knob, so there is no ``tuned`` setting and no asyncio.
"""

from __future__ import annotations

import threading
from typing import Any

from _common import Base, Sink, Unsupported, hit, run
from redis import Redis
from rq import Queue, SimpleWorker
from rq.timeouts import TimerDeathPenalty

#: by name: rq refuses functions of ``__main__``; the worker imports this file as ``rq_peer``
NOOP = "rq_peer.noop"


def noop(i: int, pushed_at: float) -> None:
    hit(pushed_at)


class QuietWorker(SimpleWorker):
    death_penalty_class = TimerDeathPenalty

    def _install_signal_handlers(self) -> None:  # not the main thread
        return None


class Adapter(Base):
    name = "rq"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.redis = Redis.from_url(url)
        self.queue = Queue("compare", connection=self.redis)

    def enqueue(self, i: int, pushed_at: float) -> None:
        self.queue.enqueue(NOOP, i, pushed_at)

    def enqueue_bulk(self, items: list[tuple[int, float]]) -> None:
        self.queue.enqueue_many([Queue.prepare_data(NOOP, (i, t)) for i, t in items])

    def start_worker(self, sink: Sink, mode: str | int) -> Any:
        if mode not in ("defaults", 1):
            raise Unsupported("one SimpleWorker runs one job at a time; no knob to tune")
        worker = QuietWorker([Queue("compare", connection=Redis.from_url(self.url))])
        thread = threading.Thread(
            target=worker.work, kwargs={"logging_level": "WARNING"}, daemon=True
        )
        thread.start()
        return worker, thread

    def stop_worker(self, handle: Any) -> None:
        worker, thread = handle
        worker._stop_requested = True
        thread.join(2)  # it may sit in BLPOP; the thread is a daemon

    def close(self) -> None:
        self.redis.close()


if __name__ == "__main__":
    run(Adapter)
