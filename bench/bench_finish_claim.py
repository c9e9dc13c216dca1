"""A worker's acknowledgements and next claim: two script calls (``finish_batch`` then
``claim``), the same two at once (the ack on a helper thread while the claim is made, as the
thread ``Worker`` sends them without ADR 40), and one call (``finish_and_claim``, ADR 40), on an
embedded Valkey (prints numbers; not a test).

    uv run --no-sync python bench/bench_finish_claim.py [--rounds N] [--batch B]

Each round fills a fresh queue (20 tenants), leases ``B`` tasks, then repeats 200 times
"finish the ``B`` held tasks and claim ``B`` more" in each of the three ways, the order
rotating from round to round. Per acknowledged-and-claimed batch it reads, from ``INFO
commandstats`` (reset before each half): the commands the server ran (the scripts' inner
commands included; deterministic) and the server's time in EVALSHA/FCALL (noisy on this shared
2-core machine); and, on the client, the wall time per batch (one or two round trips, the
client's encoding and decoding). Medians over the rounds and the ratios to one call.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fairque_core.domain.enums import Priority
from fairque_core.domain.models import Message
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.servers.embedded import EmbeddedValkey

STEPS = 200
TENANTS = 20


def _fill(backend: RedisBackend, n: int) -> None:
    now = time.time()
    for start in range(0, n, 1000):
        backend.push_batch(
            [
                Message(
                    task_id=f"t{i}",
                    tenant=f"u{i % TENANTS}",
                    priority=Priority.NORMAL,
                    body=b'{"n": 1}',
                    created_at=now,
                )
                for i in range(start, min(n, start + 1000))
            ]
        )


def _stats(client: Any) -> tuple[int, float]:
    info = client.info("commandstats")
    calls = sum(int(v["calls"]) for k, v in info.items() if not k.startswith("cmdstat_info"))
    usec = sum(float(info.get(f"cmdstat_{c}", {}).get("usec", 0)) for c in ("evalsha", "fcall"))
    return calls, usec


MODES = ("two calls", "two at once", "one call")


def half(url: str, batch: int, mode: str) -> dict[str, float]:
    backend = RedisBackend.from_url(url, queue=f"bfc{uuid.uuid4().hex[:8]}")
    try:
        _fill(backend, batch * (STEPS + 3))
        held = backend.claim(worker_id="w", count=batch)

        helper = ThreadPoolExecutor(1)

        def step(held: list[Any], mode: str) -> list[Any]:
            items = [(c.message.task_id, c.lease.token, b"1") for c in held]
            if mode == "one call":
                flags, held = backend.finish_and_claim(items, worker_id="w", count=batch)
            elif mode == "two at once":
                sent = helper.submit(backend.finish_batch, items)
                held = backend.claim(worker_id="w", count=batch)
                flags = sent.result()
            else:
                flags = backend.finish_batch(items)
                held = backend.claim(worker_id="w", count=batch)
            if not all(flags) or len(held) != batch:
                raise RuntimeError(f"unexpected step: {flags}, {len(held)} claimed")
            return held

        held = step(step(held, "one call"), "two calls")  # scripts loaded before the count
        client = backend.client
        client.config_resetstat()
        started = time.perf_counter()
        for _ in range(STEPS):
            held = step(held, mode)
        wall = time.perf_counter() - started
        calls, usec = _stats(client)
        return {
            "commands": (calls - 1) / STEPS,  # - the CONFIG RESETSTAT itself
            "server_us": usec / STEPS,
            "wall_us": wall * 1e6 / STEPS,
        }
        helper.shutdown()
    finally:
        backend.purge_all()
        backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 10, 50])
    opts = parser.parse_args()
    with EmbeddedValkey() as server:
        for batch in opts.batch:
            got: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
            for round_no in range(opts.rounds):
                for k in range(len(MODES)):
                    mode = MODES[(round_no + k) % len(MODES)]
                    got[mode].append(half(server.url, batch, mode))
            print(f"\nbatch {batch} (finish {batch}, claim {batch}), medians of {opts.rounds}")
            print(f"{'':<18}" + "".join(f"{m:>13}" for m in MODES) + "   one/two  one/at once")
            for key, label in (
                ("commands", "server commands"),
                ("server_us", "server script us"),
                ("wall_us", "client wall us"),
            ):
                med = {m: statistics.median(r[key] for r in got[m]) for m in MODES}
                one = med["one call"]
                print(
                    f"{label:<18}"
                    + "".join(f"{med[m]:>13.1f}" for m in MODES)
                    + f"   {one / med['two calls']:>7.2f}  {one / med['two at once']:>11.2f}"
                )


if __name__ == "__main__":
    main()
