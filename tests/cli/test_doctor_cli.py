"""``fairque doctor [--repair] [--json]`` on a live Valkey queue (issue 16, defect 3)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import redis

from fairque_cli.main import main
from fairque_core import Priority, Task
from fairque_redis import connect

pytestmark = pytest.mark.redis


def cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(args), stdout=out)
    return code, out.getvalue()


def test_doctor_finds_and_repairs_a_damaged_queue(server_url: str, queue_name: str) -> None:
    base = ("--url", server_url, "--queue", queue_name)
    with connect(server_url, queue=queue_name) as queue:
        queue.push_batch([Task.create("t", Priority.NORMAL, {"k": k}) for k in range(3)])
        code, text = cli("doctor", *base)
        assert code == 0
        assert "sound" in text
        started = queue.claim()
        assert started is not None
        raw: Any = redis.Redis.from_url(server_url)
        raw.zrem(f"fq:{{{queue_name}}}:leases", started.task_id)  # a lease lost half-way
        raw.set(f"fq:{{{queue_name}}}:wake", "junk")  # a queue key of the wrong type
        code, text = cli("doctor", *base)
        assert code == 1
        assert "started but is in []" in text
        assert "wake" in text
        assert "fairque doctor --repair" in text
        code, text = cli("doctor", *base, "--repair", "--json")
        report = json.loads(text)
        assert code == 0, text
        assert report["remaining"] == []
        assert report["findings"]
        assert any("started without a lease" in line for line in report["repaired"])
        assert any("deleted" in line and "wake" in line for line in report["repaired"])
        code, text = cli("doctor", *base)
        assert code == 0
        assert "sound" in text
        ids = set()
        while (task := queue.claim()) is not None:
            queue.finish(task)
            ids.add(task.task_id)
        assert started.task_id in ids
        assert len(ids) == 3
        raw.close()
