"""Replicated writes (``durability="replicated"``, ADR 33) by FCALL vs EVALSHA (ADR 41), A/B in
one run on an embedded Valkey primary with one replica.

    uv run --no-sync python bench/bench_replicated_functions.py [--rounds N] [--blocks N]
        [--size N] [--fsync]

Two backends stay open side by side, one with ``scripts=functions`` and one with
``scripts=eval``, each on a queue of its own. Each round runs ``--blocks`` blocks of
``--size`` calls per backend, interleaved (functions block, eval block, the order alternating
block by block): first replicated pushes one by one, then claim + finish one task at a time
(the finish waits; the claim does not). Interleaving small blocks puts both modes in the same
seconds of a noisy machine. Printed per round: the median client µs per call of each mode's
blocks and their ratio, and the server's µs per script call (``INFO commandstats``: the
functions backend sends only FCALL, the eval one only EVALSHA, so the two counters split the
modes); at the end the median of the per-round ratios functions/eval.

Without ``--fsync`` the replica has no AOF and the backends wait with ``WAIT`` only
(``replica_fsync=False``); with it the replica has ``appendfsync always`` and the wait is
``WAIT`` + ``WAITAOF``. The machine is shared and noisy: read the ratios, not the absolutes.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from fairque_core import Message, Priority
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.durability.modes import Durability
from fairque_redis.servers.embedded import EmbeddedValkey

MODES = ("functions", "eval")
_COUNTER = {"functions": "fcall", "eval": "evalsha"}


def _server(raw: redis.Redis) -> dict[str, tuple[int, float]]:
    info = raw.info("commandstats")
    out = {}
    for mode, name in _COUNTER.items():
        stats = info.get(f"cmdstat_{name}", {})
        out[mode] = (int(stats.get("calls", 0)), float(stats.get("usec", 0)))
    return out


class Side:
    """One mode's backend and its running task counter."""

    def __init__(self, url: str, mode: str, durability: Durability) -> None:
        queue = f"brf-{mode}-{uuid.uuid4().hex[:6]}"
        self.backend = RedisBackend.from_url(url, queue=queue, scripts=mode, durability=durability)
        self.next = 0
        self.backend.push(self._msg())  # loaded, checked, the wait detected

    def _msg(self) -> Message:
        self.next += 1
        i = self.next
        return Message(task_id=f"m{i}", tenant=f"t{i % 50}", priority=Priority.NORMAL, body=b"{}")

    def push(self, size: int) -> None:
        for _ in range(size):
            self.backend.push(self._msg())

    def claim_finish(self, size: int) -> None:
        for _ in range(size):
            [claimed] = self.backend.claim(worker_id="w")
            self.backend.finish(claimed.message.task_id, claimed.lease.token, b"ok")


def _blocks(
    sides: dict[str, Side], raw: redis.Redis, work: Callable[[Side, int], None], opts: Any
) -> dict[str, tuple[float, float]]:
    """mode -> (median client µs per call over the blocks, server µs per script call)."""
    per_call: dict[str, list[float]] = {mode: [] for mode in MODES}
    raw.config_resetstat()
    for block in range(opts.blocks):
        for mode in MODES if block % 2 == 0 else MODES[::-1]:
            started = time.perf_counter()
            work(sides[mode], opts.size)
            per_call[mode].append((time.perf_counter() - started) / opts.size * 1e6)
    server = _server(raw)
    return {
        mode: (
            statistics.median(per_call[mode]),
            server[mode][1] / server[mode][0] if server[mode][0] else 0.0,
        )
        for mode in MODES
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--size", type=int, default=25)
    parser.add_argument("--fsync", action="store_true", help="replica AOF always + WAITAOF")
    opts = parser.parse_args()
    durability = Durability("replicated", timeout_ms=2000, replica_fsync=opts.fsync)
    replica_args = ["--appendfsync", "always"] if opts.fsync else []
    ratios: dict[str, list[float]] = {}
    with EmbeddedValkey(extra_args=["--repl-diskless-sync-delay", "0"]) as primary:
        replica = EmbeddedValkey(
            appendonly=opts.fsync,
            extra_args=[*replica_args, "--replicaof", "127.0.0.1", str(primary.port)],
        )
        with replica:
            check = redis.Redis.from_url(replica.url)
            deadline = time.monotonic() + 15
            while check.info("replication").get("master_link_status") != "up":
                if time.monotonic() > deadline:
                    raise SystemExit("the replica never synced")
                time.sleep(0.02)
            check.close()
            raw = redis.Redis.from_url(primary.url)
            sides = {mode: Side(primary.url, mode, durability) for mode in MODES}
            workloads: dict[str, Callable[[Side, int], None]] = {
                "push": Side.push,
                "claim+finish": Side.claim_finish,
            }
            for r in range(opts.rounds):
                for name, work in workloads.items():
                    got = _blocks(sides, raw, work, opts)
                    for i, what in enumerate(("client us/call", "server us/script")):
                        f, e = got["functions"][i], got["eval"][i]
                        ratios.setdefault(f"{name} {what}", []).append(f / e if e else 0.0)
                        print(
                            f"round {r + 1} {name} {what}: functions {f:.1f} vs eval {e:.1f} "
                            f"(x{f / e if e else 0.0:.3f})"
                        )
            for side in sides.values():
                side.backend.purge_all()
                side.backend.close()
            raw.close()
    wait = "WAIT + WAITAOF" if opts.fsync else "WAIT only"
    print(
        f"\nmedian of the per-round ratios functions/eval ({opts.rounds} rounds of "
        f"{opts.blocks} blocks of {opts.size} calls per mode, {wait}):"
    )
    for key, values in ratios.items():
        rounds = ", ".join(f"{v:.2f}" for v in values)
        print(f"  {key}: x{statistics.median(values):.3f}  (rounds: {rounds})")


if __name__ == "__main__":
    main()
