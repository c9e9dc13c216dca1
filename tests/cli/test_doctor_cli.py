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


def test_a_field_that_is_not_a_number_is_found_and_repaired(
    server_url: str, queue_name: str
) -> None:
    """``meta ready`` set to "lots" stops every claim; the doctor crashed on it (a bare
    ValueError) and so did ``--repair``. Now it is a finding, and the repair rewrites it; a
    tenant counter that is not a number is restarted at 0 (a counter cannot be recounted)."""
    base = ("--url", server_url, "--queue", queue_name)
    with connect(server_url, queue=queue_name) as queue:
        queue.push_batch([Task.create("acme") for _ in range(3)])
        raw: Any = redis.Redis.from_url(server_url)
        raw.hset(f"fq:{{{queue_name}}}:meta", "ready", "lots")
        raw.hset(f"fq:{{{queue_name}}}:ts:acme", "finished", "x")
        code, text = cli("doctor", *base)
        assert code == 1, text
        assert "meta ready" in text
        code, text = cli("doctor", *base, "--repair")
        assert code == 0, text
        assert "meta ready 'lots' -> 3" in text
        assert "counter finished 'x' -> 0" in text
        assert len(queue.claim_batch(3)) == 3  # claims work again
        raw.close()


def test_a_damaged_tenants_index_is_rebuilt(server_url: str, queue_name: str) -> None:
    """The repair deleted a damaged ``tenants`` index and never rebuilt it: the doctor failed
    on every run, and the tenants vanished from every listing (a push adds a tenant once)."""
    base = ("--url", server_url, "--queue", queue_name)
    with connect(server_url, queue=queue_name) as queue:
        queue.push_batch([Task.create(t) for t in ("acme", "globex", "acme")])
        raw: Any = redis.Redis.from_url(server_url)
        raw.delete(f"fq:{{{queue_name}}}:tenants")
        raw.set(f"fq:{{{queue_name}}}:tenants", "junk")
        code, text = cli("doctor", *base, "--repair")
        assert code == 0, text
        assert "tenant acme back in the tenants index" in text
        assert sorted(queue.list_tenants()[0]) == ["acme", "globex"]
        code, text = cli("doctor", *base)
        assert code == 0, text
        raw.close()


def test_a_damaged_children_list_is_rebuilt_from_the_waits(
    server_url: str, queue_name: str
) -> None:
    """The repair deleted a damaged ``children:<parent>`` key and said the queue was sound;
    the child then waited for ever after its parent finished."""
    base = ("--url", server_url, "--queue", queue_name)
    with connect(server_url, queue=queue_name) as queue:
        parent = queue.push(Task.create("acme"))
        child = queue.push(Task.create("acme", depends_on=[parent.task_id]))
        raw: Any = redis.Redis.from_url(server_url)
        key = f"fq:{{{queue_name}}}:children:{parent.task_id}"
        raw.delete(key)
        raw.set(key, "junk")
        code, text = cli("doctor", *base, "--repair")
        assert code == 0, text
        assert f"task {child.task_id} back in the children of {parent.task_id}" in text
        task = queue.claim()
        assert task is not None
        assert task.task_id == parent.task_id
        queue.finish(task)
        released = queue.claim()
        assert released is not None
        assert released.task_id == child.task_id
        raw.close()


def test_doctor_checks_and_repairs_each_partition(
    server_url: str, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partitioned queue (ADR 34; three partitions on one Valkey) is checked and repaired
    partition by partition; each finding names its partition."""
    from fairque_redis.doctor.examine import queue_spaces
    from fairque_redis.keys import partition_for

    monkeypatch.setenv("FAIRQUE_QUEUE__PARTITIONS", "3")
    base = ("--url", server_url, "--queue", queue_name)
    # two tenants in each partition, three tasks each
    tenants: dict[int, list[str]] = {0: [], 1: [], 2: []}
    k = 0
    while any(len(names) < 2 for names in tenants.values()):
        name = f"t{k}"
        k += 1
        names = tenants[partition_for(name, 3)]
        if len(names) < 2:
            names.append(name)
    raw: Any = redis.Redis.from_url(server_url)
    with connect(server_url, queue=queue_name, partitions=3) as queue:
        pushed = [
            Task.create(name, Priority.NORMAL, {"k": i})
            for names in tenants.values()
            for name in names
            for i in range(3)
        ]
        queue.push_batch(pushed)
        spaces = queue_spaces(raw, queue_name)
        assert [keys.partition for keys in spaces] == [0, 1, 2]
        code, text = cli("doctor", *base)
        assert code == 0, text
        assert "(3 partitions): sound" in text

        # partition 1: a started task's lease lost; partition 2: its wake list of another type
        started = None
        finished: set[str] = set()
        while started is None or partition_for(started.tenant, 3) != 1:
            started = queue.claim()
            assert started is not None
            if partition_for(started.tenant, 3) != 1:
                queue.finish(started)
                finished.add(started.task_id)
        raw.zrem(spaces[1].leases, started.task_id)
        raw.set(spaces[2].prefix + "wake", "junk")
        code, text = cli("doctor", *base)
        assert code == 1
        assert f"partition 1: task {started.task_id}" in text
        assert "partition 2: key 'wake' is a string" in text
        assert not any(line.startswith("  - partition 0:") for line in text.splitlines())

        code, text = cli("doctor", *base, "--repair", "--json")
        report = json.loads(text)
        assert code == 0, text
        assert report["partitions"] == 3
        assert report["remaining"] == []
        assert {line.split(":")[0] for line in report["findings"]} == {
            "partition 1",
            "partition 2",
        }
        assert any(
            line.startswith("partition 1:") and "started without a lease" in line
            for line in report["repaired"]
        )
        assert any(
            line.startswith("partition 2:") and "deleted" in line and "wake" in line
            for line in report["repaired"]
        )
        code, text = cli("doctor", *base)
        assert code == 0, text
        # nothing lost: every task not finished above is claimed once now, the repaired one too
        ids: list[str] = []
        while (task := queue.claim()) is not None:
            queue.finish(task)
            ids.append(task.task_id)
        assert started.task_id in ids
        assert len(ids) == len(set(ids))
        assert set(ids) | finished == {task.task_id for task in pushed}
        assert not set(ids) & finished
    raw.close()
