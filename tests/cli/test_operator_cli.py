"""Operator commands on Valkey: queues, tenants, tenant set-weight|set-tier|apply, purge,
task show|cancel, workers (each with --json)."""

from __future__ import annotations

import io
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import missing_server
from fairque_cli.main import main
from fairque_core import Priority, Task, TaskState
from fairque_core.app.worker.registry import WorkerRegistry
from fairque_core.domain.outcomes import LEASE_TERMINATE
from fairque_redis import connect
from fairque_redis.servers.embedded import EmbeddedValkey, ServerBinaryNotFoundError

pytestmark = pytest.mark.redis


def cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(args), stdout=out)
    return code, out.getvalue()


def cli_json(*args: str) -> Any:
    code, text = cli(*args, "--json")
    assert code == 0, text
    return json.loads(text)


@pytest.fixture(scope="module")
def _own_server() -> Iterator[EmbeddedValkey]:
    """A Valkey for this module alone. ``fairque queues`` reads every queue registered on its
    server, and the session server holds every queue the tests before this module made: once
    the contract tests had run on the same xdist worker, one listing took 48 s (three of these
    tests 117 s together, against under 1 s on a fresh server)."""
    try:
        server = EmbeddedValkey()
    except ServerBinaryNotFoundError as exc:
        missing_server(f"embedded Valkey unavailable: {exc}")
    with server:
        yield server


@pytest.fixture
def server_url(_own_server: EmbeddedValkey) -> str:
    """This module's own server (instead of the session's: see ``_own_server``)."""
    return str(_own_server.url)


@pytest.fixture
def queue(server_url: str, queue_name: str) -> Any:
    with connect(server_url, queue=queue_name) as q:
        yield q


def _push(queue: Any, tenant: str, n: int, **kwargs: Any) -> list[str]:
    tasks = [Task.create(tenant, Priority.NORMAL, {"k": k}, **kwargs) for k in range(n)]
    return queue.push_batch(tasks)


def test_queues_lists_written_queues_with_sizes(server_url, queue_name, queue):
    _push(queue, "alice", 3)
    queue.push_intake_batch([Task.create("bob", Priority.NORMAL, {"k": k}) for k in range(2)])
    rows = cli_json("--url", server_url, "--queue", queue_name, "queues")
    mine = [r for r in rows if r["queue"] == queue_name]
    assert mine == [
        {
            "queue": queue_name,
            "intake": 2,  # not ingested yet (ADR 47): no claim has run
            "ready": 3,
            "scheduled": 0,
            "leased": 0,
            "dlq": 0,
            "active_tenants": 1,
            "tenants": 1,
        }
    ]
    code, text = cli("--url", server_url, "queues")  # from another queue's point of view
    assert code == 0
    assert queue_name in text


def test_a_foreign_member_of_the_queue_registry_is_skipped(server_url, queue_name, queue):
    """A name no fairque queue can have, put in ``fq:queues`` by something else, is skipped
    with a warning; the listing of the real queues goes on (it failed whole, blaming the
    user's configuration)."""
    import redis

    _push(queue, "alice", 1)
    raw = redis.Redis.from_url(server_url)
    foreign = f"bad{{{queue_name}}}"
    raw.sadd("fq:queues", foreign)
    try:
        code, text = cli("--url", server_url, "queues")
        assert code == 0
        assert queue_name in text
        assert foreign not in text
        assert foreign not in queue.backend.list_queues()
    finally:
        raw.srem("fq:queues", foreign)
        raw.close()


def test_a_damaged_queue_is_listed_as_unreadable_not_fatal(server_url, queue_name, queue):
    """One registered queue whose ``partitions`` record is damaged made ``fairque queues``
    fail whole (another test's queue on a shared server could do it)."""
    import redis

    from fairque_redis.keys import KeySpace

    _push(queue, "alice", 1)
    damaged = queue_name + "-dmg"
    raw = redis.Redis.from_url(server_url)
    raw.set(KeySpace(damaged).partition_count, "bogus")
    raw.sadd("fq:queues", damaged)
    try:
        code, text = cli("--url", server_url, "queues")
        assert code == 0
        assert queue_name in text
        assert f"{damaged}: unreadable (DamagedKeyError" in text
        rows = cli_json("--url", server_url, "queues")
        [row] = [r for r in rows if r["queue"] == damaged]
        assert row["error"].startswith("DamagedKeyError")
    finally:
        raw.srem("fq:queues", damaged)
        raw.delete(KeySpace(damaged).partition_count)
        raw.close()


def test_tenants_weights_tiers_depth_and_paging(server_url, queue_name, queue):
    for tenant, n in (("alice", 2), ("bob", 1), ("carol", 4)):
        _push(queue, tenant, n)
    base = ("--url", server_url, "--queue", queue_name)
    assert cli_json(*base, "tenant", "set-weight", "bob", "3")["weight"] == pytest.approx(3)
    got = cli_json(*base, "tenant", "set-tier", "bob", "2")
    assert (got["weight"], got["tier"]) == (pytest.approx(3), 2)  # the weight was kept
    data = cli_json(*base, "tenants")
    assert data["total"] == 3
    by_name = {r["tenant"]: r for r in data["tenants"]}
    assert [r["tenant"] for r in data["tenants"]] == ["alice", "bob", "carol"]
    assert by_name["bob"]["weight"] == pytest.approx(3)
    assert by_name["bob"]["tier"] == 2
    assert by_name["carol"]["ready"] == 4
    assert by_name["alice"]["limits"] is None
    queue.set_tenant_limits("carol", max_running=2, rate=5.0)  # the column said "-" always
    carol = next(r for r in cli_json(*base, "tenants")["tenants"] if r["tenant"] == "carol")
    assert carol["limits"] == {"max_running": 2, "rate": 5.0}
    code, text = cli(*base, "tenants")
    assert "max_running=2 rate=5" in text
    page = cli_json(*base, "tenants", "--limit", "1", "--offset", "2")
    assert [r["tenant"] for r in page["tenants"]] == ["carol"]
    code, text = cli(*base, "tenants", "--limit", "2")
    assert code == 0
    assert "--offset 2 shows the next page" in text
    assert "-" in text.splitlines()[2]
    with pytest.raises(SystemExit) as info:  # past the page bound: a usage error
        cli(*base, "tenants", "--limit", "1001")
    assert info.value.code == 2
    code, _ = cli(*base, "tenant", "set-weight", "bob", "-1")
    assert code == 2  # a bad value: a usage error


def test_tenant_apply_writes_the_config(server_url, queue_name, queue, tmp_path: Path):
    path = tmp_path / "q.yaml"
    path.write_text(
        f"queue:\n  name: {queue_name}\n  tenant_weights: {{alice: 5}}\n", encoding="utf-8"
    )
    assert cli("--url", server_url, "--config", str(path), "tenant", "apply")[0] == 0
    assert queue.get_tenant_weights(["alice"])["alice"] == (5.0, 0)


def test_purge_a_tenant_and_all(server_url, queue_name, queue):
    alice = _push(queue, "alice", 3)
    _push(queue, "alice", 1, execute_after=time.time() + 600)
    bob = _push(queue, "bob", 2)
    base = ("--url", server_url, "--queue", queue_name)
    got = cli_json(*base, "purge", "--tenant", "alice")
    assert got["purged"] == 4
    assert all(queue.get_state(t) is TaskState.CANCELED for t in alice)
    assert all(queue.get_state(t) is TaskState.QUEUED for t in bob)
    code, text = cli(*base, "purge", "--all")
    assert code == 2  # needs --yes (a usage error); nothing changed
    assert queue.get_stats()["ready"] == 2
    code, text = cli(*base, "purge", "--all", "--yes")
    assert code == 0
    assert "purged 2 waiting tasks" in text
    stats = queue.get_stats()
    assert (stats["ready"], stats["canceled"]) == (0, 6)
    assert cli(*base, "purge")[0] == 2


def test_task_show_and_cancel(server_url, queue_name, queue):
    [task_id] = _push(queue, "alice", 1)
    base = ("--url", server_url, "--queue", queue_name)
    shown = cli_json(*base, "task", "show", task_id)
    assert (shown["state"], shown["tenant"], shown["payload"]) == ("queued", "alice", {"k": 0})
    code, text = cli(*base, "task", "show", task_id)
    assert code == 0
    assert "alice" in text
    assert cli(*base, "task", "cancel", task_id) == (0, f"canceled {task_id}\n")
    assert queue.get_state(task_id) is TaskState.CANCELED
    assert cli(*base, "task", "cancel", task_id)[0] == 1  # already canceled
    assert cli(*base, "task", "show", "nope")[0] == 1


def test_task_cancel_terminate_reaches_the_lease_holder(server_url, queue_name, queue):
    """ADR 76: ``--terminate`` is carried to the running task's lease (its heartbeat)."""
    [task_id] = _push(queue, "alice", 1)
    [task] = queue.claim_batch(1)
    base = ("--url", server_url, "--queue", queue_name)
    assert cli(*base, "task", "cancel", task_id, "--terminate") == (0, f"canceled {task_id}\n")
    assert queue.heartbeat_leases([task]) == [LEASE_TERMINATE]
    assert queue.get_state(task_id) is TaskState.CANCELED


def test_workers_lists_records_and_marks_gone_ones(server_url, queue_name, queue):
    base = ("--url", server_url, "--queue", queue_name)
    assert cli_json(*base, "workers") == []
    now = time.time()
    live = WorkerRegistry(queue.backend, "w-live", queue=queue_name, concurrency=4, interval=5)
    live.beat({"state": "running", "executing": 2, "in_flight": 5, "processed": 7})
    old = WorkerRegistry(queue.backend, "w-old", interval=1, clock=lambda: now - 10)
    old.beat({"state": "running"})
    dead = WorkerRegistry(queue.backend, "w-dead", interval=1, clock=lambda: now - 1000)
    dead.beat({"state": "running"})
    rows = {w["worker_id"]: w for w in cli_json(*base, "workers")}
    assert set(rows) == {"w-live", "w-old"}  # w-dead was pruned
    assert (rows["w-live"]["running"], rows["w-live"]["leased"]) == (2, 5)  # busy, not leases
    assert rows["w-live"]["stale"] is False
    assert rows["w-old"]["stale"] is True
    assert "w-dead" not in queue.backend.list_workers()
    code, text = cli(*base, "workers")
    assert code == 0
    assert "2/4" in text
    assert re.search(r"^w-old .* gone ", text, re.MULTILINE), text
    assert "1 gone: no heartbeat record for 3 s" in text


def test_a_user_without_the_registry_key_still_pushes(server_url, queue_name, caplog):
    import redis

    admin = redis.Redis.from_url(server_url)
    user = f"noreg-{queue_name}"
    admin.execute_command(
        "ACL", "SETUSER", user, "on", ">pw", f"~fq:{{{queue_name}}}:*", "&*", "+@all"
    )
    try:
        url = server_url.replace("redis://", f"redis://{user}:pw@")
        with caplog.at_level("WARNING"), connect(url, queue=queue_name) as queue:
            queue.push(Task.create("alice"))
            assert queue.get_stats()["ready"] == 1
        assert "`fairque queues` will not list it" in caplog.text
    finally:
        admin.execute_command("ACL", "DELUSER", user)
        admin.close()


def test_tenant_apply_refuses_a_tenant_or_a_value(server_url, queue_name, capsys):
    """``tenant apply t1 5`` applied the config's table and ignored both arguments."""
    code, _ = cli("--url", server_url, "--queue", queue_name, "tenant", "apply", "t1", "5")
    assert code == 2
    assert "tenant apply takes no TENANT or VALUE" in capsys.readouterr().err
