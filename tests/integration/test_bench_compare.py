"""bench/compare.py (issue 17): its quick run for fairque alone prints every row of the table,
and its report picks the best peer only among peers that ran.

The smoke run installs no peer (``--peers none``) and uses a few hundred tasks; it checks that each
measurement produced a figure, never how large one is. It is marked ``slow`` (``-m slow`` runs
it): each of its 13 measurements starts a Python process and an embedded Valkey of its own, 32 s
on an idle 2-core machine, and over its old 55 s bound with that machine busy. The report's
logic (the second test) stays in the default run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from fairque_redis.servers.embedded import EmbeddedValkey

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "compare.py"

ROWS = [
    "enqueue one by one",
    "enqueue bulk (batches of 1000)",
    "drain, defaults",
    "drain, tuned (cap 100, prefetch 50)",
    "drain, AsyncWorker defaults",
    "async producer, 100 concurrent pushes",
    "enqueue one by one, intake (ADR 47)",
    "enqueue bulk, intake",
    "async producer, intake",
    "latency at 200/s, p50 / p99",
    "latency at 200/s, p50 / p99, intake producer",
    "server CPU per drained task, defaults",
    "server CPU per drained task, tuned",
]


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quick_run_for_fairque_alone_prints_every_row(
    valkey_server: EmbeddedValkey, tmp_path: Path
) -> None:
    out_file = tmp_path / "out.json"
    args = ["--quick", "--peers", "none", "--n", "400", "--latency-n", "20"]
    run = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--json", str(out_file)],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    for label in ROWS:
        assert f"| {label} |" in run.stdout
    doc = json.loads(out_file.read_text())
    assert [row["measure"] for row in doc["rows"]] == ROWS
    for row in doc["rows"]:
        assert row["fairque"][0].isdigit(), row  # a figure, not "failed (...)" or "n/a"
        assert row["met"] in ("yes", "no", "n/a (huey not run)"), row
        assert row["best peer"] == "none ran"
    fq = doc["median"]["fairque"]
    rated = ("enqueue_one", "drain_defaults", "async_push", "enqueue_one_intake")
    assert all(fq[key]["rate"] > 0 for key in rated)
    for key in ("latency", "latency_intake"):
        assert 0 < fq[key]["p50"] <= fq[key]["p99"]
        assert fq[key]["server_us"] > 0  # the server's CPU per task at the trickle
    assert "µs srv)" in next(r for r in doc["rows"] if r["measure"] == ROWS[9])["fairque"]


def test_the_best_peer_is_taken_among_peers_that_ran(
    load_bench: Callable[[str], ModuleType],
) -> None:
    compare = load_bench("compare_report")
    fairque = {
        "enqueue_one": {"rate": 5000.0},
        "drain_defaults": {"rate": 8000.0, "server_us": 40.0},
        "drain_tuned": {"rate": 21000.0, "server_us": 20.0},
        "latency": {"p50": 0.4, "p99": 1.4},
        "enqueue_one_intake": {"rate": 9500.0},
    }
    med = {
        "fairque": fairque,
        "huey": {
            "enqueue_one": {"rate": 10000.0},
            "drain_defaults": {"rate": 5000.0, "server_us": 30.0},
            "drain_tuned": {"skip": "slower than its defaults"},
            "latency": {"p50": 0.5, "p99": 1.0},
        },
        "rq": {
            "enqueue_one": {"error": "boom"},
            "drain_defaults": {"rate": 9000.0, "server_us": 300.0},
        },
        "celery": {key: {"skip": "install failed: no network"} for key in fairque},
        # the floor (redis-py and one list) beats every queue and is never the best peer
        "floor": {
            "enqueue_one": {"rate": 11000.0},
            "drain_defaults": {"rate": 20000.0, "server_us": 10.0},
            "latency": {"p50": 0.3, "p99": 0.9},
        },
    }
    rows = {row["measure"]: row for row in compare.rows(med)}
    one = rows["enqueue one by one"]
    assert one["best peer"] == "huey 10,000/s"  # rq's error is not a figure
    assert (one["ratio"], one["met"]) == ("0.50x", "no")  # 5,000 < 0.9 x 10,000
    drain = rows["drain, defaults"]
    assert drain["best peer"].startswith("rq 9,000/s")
    assert (drain["ratio"], drain["met"]) == ("0.89x", "no")  # 8,000 < 2 x huey's 5,000
    # tuned: each peer at its better setting; huey's tuned was skipped, its defaults count
    assert rows["drain, tuned (cap 100, prefetch 50)"]["best peer"].startswith("rq 9,000/s")
    assert rows["drain, tuned (cap 100, prefetch 50)"]["met"] == "yes"
    assert rows["latency at 200/s, p50 / p99"]["met"] == "yes"
    cpu = rows["server CPU per drained task, defaults"]
    assert cpu["best peer"] == "huey 30.0 µs"
    assert (cpu["ratio"], cpu["met"]) == ("0.75x", "no")
    assert rows["enqueue bulk (batches of 1000)"]["fairque"] == "not run"
    # an intake row stands against the peers' one push path (they have no intake)
    intake = rows["enqueue one by one, intake (ADR 47)"]
    assert intake["best peer"] == "huey 10,000/s"
    assert (intake["ratio"], intake["met"]) == ("0.95x", "yes")  # 9,500 >= 0.9 x 10,000


def test_report_of_a_saved_run_counts_an_asyncio_peer_drain_once(tmp_path: Path) -> None:
    """taskiq's and arq's only worker is asyncio: their AsyncWorker row reuses their default
    drain (``same_as``) instead of running it twice; ``--report`` reprints a saved run."""
    drain = [{"rate": r, "server_us": 30.0} for r in (1000.0, 3000.0, 2000.0)]
    doc = {
        "started": "then",
        "server": "Valkey 9",
        "n": 10,
        "rounds": 3,
        "skipped": {"arq": "install failed: offline"},
        "raw": {
            "fairque": {"drain_async": [{"rate": 5000.0, "server_us": 60.0}] * 3},
            "taskiq": {"drain_defaults": drain, "drain_async": [{"same_as": "drain_defaults"}] * 3},
        },
    }
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(doc))
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--report", str(saved)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    line = next(x for x in run.stdout.splitlines() if x.startswith("| drain, AsyncWorker"))
    assert "taskiq 2,000/s" in line  # the median of its three default drains
    assert "| 2.50x |" in line
    assert "| arq | n/a (install failed: offline)" in run.stdout
