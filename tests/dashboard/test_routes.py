"""Every route and action of the dashboard through an ASGI test client, on the model and Valkey."""

from __future__ import annotations

import os
import re
import socket
import time

import pytest

from fairque_core import Task, TaskState
from fairque_core.app.worker.registry import WorkerRegistry

from .conftest import TOKEN, Env, dead_letter


def test_overview_shows_counts_charts_and_jain(seeded: Env) -> None:
    with seeded.client() as client:
        page = client.get("/")
        assert page.status_code == 200
        html = page.text
        assert "<svg" in html
        assert 'data-poll="/?partial=live"' in html
        assert _count(html, "ready") == 5  # alice 3, bob 1 (the other runs), mallory 1
        assert _count(html, "running") == 0  # handlers running: no worker holds bob-1
        assert _count(html, "leased") == 1  # the server's count: bob-1 is claimed
        assert _count(html, "DLQ") == 2
        assert _count(html, "deferred") is None  # the queue does not report it yet: n/a
        assert _count(html, "intake") == 0
        seeded.queue.push_intake(Task.create("zed"))  # stored, not ingested (ADR 47)
        assert _count(client.get("/?partial=live").text, "intake") == 1
        live = client.get("/?partial=live")
        assert live.status_code == 200
        assert "<html" not in live.text
        assert 'id="jain"' in live.text


def _count(html: str, label: str) -> int | None:
    match = re.search(rf'data-count="{re.escape(label)}"><span class="value">([^<]+)</span>', html)
    assert match is not None, label
    text = match.group(1).replace(",", "")
    return None if text == "n/a" else int(text)


def test_jain_index_from_samples(env: Env) -> None:
    q = env.queue
    for tenant in ("a", "b"):
        for i in range(6):
            q.push(Task.create(tenant, task_id=f"{tenant}-{i}"))
    with env.client() as client:
        sampler = client.app.state.dashboard.sampler  # type: ignore[attr-defined]
        client.portal.call(sampler.sample)  # type: ignore[union-attr]
        for _ in range(4):  # fair claims: two each
            task = q.claim()
            assert task is not None
            q.finish(task)
        client.portal.call(sampler.sample)  # type: ignore[union-attr]
        window = sampler.fairness()
        assert window is not None
        assert set(window.backlogged) == {"a", "b"}
        assert window.dispatches == {"a": 2, "b": 2}
        assert window.jain == pytest.approx(1.0)
        html = client.get("/?partial=live").text
        assert ">1.0000<" in html
        tenants = client.get("/tenants").text
        assert "50.0% / 50.0%" in tenants


def test_tenants_page_sort_filter_and_paging(seeded: Env) -> None:
    with seeded.client() as client:
        page = client.get("/tenants")
        assert page.status_code == 200
        for tenant in ("alice", "bob", "carol", "mallory"):
            assert f'data-tenant="{tenant}"' in page.text
        by_depth = client.get("/tenants?sort=depth&dir=desc").text
        order = re.findall(r'data-tenant="([^"]+)"', by_depth)
        assert order[0] == "alice"
        ascending = re.findall(
            r'data-tenant="([^"]+)"', client.get("/tenants?sort=tenant&dir=asc").text
        )
        assert ascending == sorted(ascending)
        running = client.get("/tenants?only=running").text
        assert re.findall(r'data-tenant="([^"]+)"', running) == ["bob"]
        contains = client.get("/tenants?contains=ali").text
        assert re.findall(r'data-tenant="([^"]+)"', contains) == ["alice"]
        first = client.get("/tenants?size=2&page=1").text
        second = client.get("/tenants?size=2&page=2").text
        names = re.findall(r'data-tenant="([^"]+)"', first + second)
        assert sorted(names) == ["alice", "bob", "carol", "mallory"]
        assert "page 1 of 2" in first
        one = client.get("/tenants?tenant=bob").text
        assert re.findall(r'data-tenant="([^"]+)"', one) == ["bob"]
        table = client.get("/tenants?partial=table")
        assert table.status_code == 200
        assert "<html" not in table.text
        # figures the queue lacks are n/a, not errors; get_tenant_fairness gives lag and alarm
        assert 'data-col="p99">n/a<' in page.text
        assert 'data-col="lag">n/a<' not in page.text
        assert 'data-col="alarm">-<' in page.text


@pytest.mark.parametrize(
    "query",
    [
        "size=0",
        "size=100000",
        "page=0",
        "page=abc",
        "sort=nope",
        "dir=up",
        "only=x",
        "size=-1",
        "size=%C2%B2",  # a superscript two: str.isdigit() says yes, int() says no
        "page=%C2%B3",
    ],
)
def test_tenants_bad_query_is_400(memory_env: Env, query: str) -> None:
    with memory_env.client() as client:
        page = client.get(f"/tenants?{query}")
        assert page.status_code == 400
        assert "Traceback" not in page.text
        assert 'id="error-message"' in page.text


def test_task_page_escapes_and_caps_the_payload(seeded: Env) -> None:
    with seeded.client(payload_preview_bytes=1000) as client:
        page = client.get("/tasks/evil")
        assert page.status_code == 200
        assert "<script>alert" not in page.text
        assert "&lt;script&gt;alert(" in page.text
        assert "cut at 1,000 characters" in page.text
        assert page.text.count("y") < 3000
        assert 'id="task-state" class="state-queued">queued<' in page.text
        assert "mallory" in page.text
        assert page.headers["content-security-policy"].startswith("default-src 'self'")


def test_task_page_of_a_failed_task_shows_the_error(seeded: Env) -> None:
    with seeded.client() as client:
        page = client.get("/tasks/carol-dead-0")
        assert page.status_code == 200
        assert "failed" in page.text
        assert "boom for carol-dead-0" in page.text


def test_task_page_dependencies(env: Env) -> None:
    env.queue.push(Task.create("t", task_id="parent"))
    env.queue.push(Task.create("t", task_id="child", depends_on=["parent"]))
    with env.client() as client:
        page = client.get("/tasks/child").text
        assert 'href="/tasks/parent"' in page
        assert "parent</a>: queued" in page


def test_unknown_and_malformed_task_ids(env: Env) -> None:
    with env.client() as client:
        missing = client.get("/tasks/no-such-task")
        assert missing.status_code == 404
        assert "no task" in missing.text
        bad = client.get("/tasks/" + "x" * 300)
        assert bad.status_code == 400
        odd = client.get("/tasks/has%20space")
        assert odd.status_code == 400
        assert "Traceback" not in odd.text


def test_dlq_browse_filter_and_actions(seeded: Env) -> None:
    dead_letter(seeded.queue, "dave", "dave-dead-0")
    with seeded.client(token=TOKEN) as client:
        page = client.get("/dlq")
        assert page.status_code == 200
        entries = re.findall(r'data-entry="([^"]+)"', page.text)
        assert len(entries) == 3
        carol = client.get("/dlq?tenant=carol").text
        assert len(re.findall(r'data-entry="([^"]+)"', carol)) == 2
        failed = client.get("/dlq?failure_type=failed").text
        assert len(re.findall(r'data-entry="([^"]+)"', failed)) == 3
        assert client.get("/dlq?failure_type=poisoned").text.count("data-entry=") == 0
        assert client.get("/dlq?failure_type=bogus").status_code == 400
        assert client.get("/dlq?size=501").status_code == 400

        # requeue one (the selection), with the token in the form
        one = _entry_of(client, "carol-dead-0")
        done = client.post("/dlq/requeue", data={"token": TOKEN, "scope": "selected", "entry": one})
        assert done.status_code == 200  # followed the 303 back to /dlq
        assert "requeued: 1" in done.text
        assert seeded.queue.get_state("carol-dead-0") is TaskState.QUEUED

        # purge all matching tenant=dave, token in the header
        done = client.post(
            "/dlq/purge",
            data={"scope": "matching", "tenant": "dave"},
            headers={"X-Fairque-Token": TOKEN},
        )
        assert "purged: 1" in done.text
        assert seeded.queue.get_state("dave-dead-0") is None
        assert seeded.queue.get_state("carol-dead-1") is TaskState.FAILED

        # requeue all (no filter): what is left
        done = client.post("/dlq/requeue", data={"token": TOKEN, "scope": "matching"})
        assert "requeued: 1" in done.text
        assert seeded.queue.list_dlq() == []
        assert (
            client.post("/dlq/requeue", data={"token": TOKEN, "scope": "selected"}).status_code
            == 400
        )


def _entry_of(client: object, task_id: str) -> str:
    html = client.get("/dlq").text  # type: ignore[attr-defined]
    match = re.search(
        rf'data-entry="([^"]+)">\s*<td><input type="checkbox" name="entry" value="[^"]+" '
        rf'aria-label="select [^"]+"></td>\s*<td><a href="/tasks/{task_id}"',
        html,
    )
    assert match is not None
    return match.group(1)


def test_actions_refused_without_a_valid_token(seeded: Env) -> None:
    with seeded.client(token=TOKEN) as client:
        for path, data in [
            ("/dlq/requeue", {"scope": "matching"}),
            ("/dlq/purge", {"scope": "matching", "token": "wrong"}),
            ("/tenants/alice/weight", {"weight": "3"}),
            ("/tasks/alice-0/cancel", {"token": TOKEN[:-1]}),
        ]:
            refused = client.post(path, data=data)
            assert refused.status_code == 403, path
            assert "token" in refused.text
        # a cross-site form, even with the token, is refused by its Origin
        cross = client.post(
            "/dlq/purge",
            data={"scope": "matching", "token": TOKEN},
            headers={"Origin": "http://evil.example"},
        )
        assert cross.status_code == 403
        assert len(seeded.queue.list_dlq()) == 2
        assert seeded.queue.get_state("alice-0") is TaskState.QUEUED


def test_read_only_without_a_configured_token(seeded: Env) -> None:
    with seeded.client(token=None) as client:
        page = client.get("/dlq").text
        assert 'id="read-only"' in page
        assert 'formaction="/dlq/requeue"' not in page
        refused = client.post("/dlq/requeue", data={"scope": "matching", "token": ""})
        assert refused.status_code == 403
        assert "read-only" in refused.text
        assert len(seeded.queue.list_dlq()) == 2


def test_set_weight_and_cancel(seeded: Env) -> None:
    with seeded.client(token=TOKEN) as client:
        done = client.post("/tenants/alice/weight", data={"token": TOKEN, "weight": "3"})
        assert done.status_code == 200
        assert "weight set" in done.text
        assert re.search(r'data-col="weight" title="from [^"]+">3<', done.text)
        bad = client.post("/tenants/alice/weight", data={"token": TOKEN, "weight": "abc"})
        assert bad.status_code == 400
        nan = client.post("/tenants/alice/weight", data={"token": TOKEN, "weight": "nan"})
        assert nan.status_code == 400
        cancel = client.post("/tasks/alice-0/cancel", data={"token": TOKEN})
        assert cancel.status_code == 200
        assert "task canceled" in cancel.text
        assert seeded.queue.get_state("alice-0") is TaskState.CANCELED
        again = client.post("/tasks/alice-0/cancel", data={"token": TOKEN})
        assert "not canceled" in again.text


def test_workers_and_schedules_pages(env: Env) -> None:
    with env.client() as client:
        workers = client.get("/workers")
        assert workers.status_code == 200
        queue = client.app.state.dashboard.queue  # type: ignore[attr-defined]
        has_registry = any(hasattr(o, "list_workers") for o in (queue, queue.backend))
        assert ('id="no-registry"' in workers.text) is not has_registry
        schedules = client.get("/schedules")
        assert schedules.status_code == 200
        has_schedules = any(hasattr(o, "list_schedules") for o in (queue, queue.backend))
        if not has_schedules:
            assert 'id="no-schedules"' in schedules.text


def test_workers_page_lists_live_and_gone_workers_with_their_figures(env: Env) -> None:
    """Issue 31 item 4: one row per worker with id, host, pid, queue, state, busy slots of its
    concurrency, leases, processed/failed and last seen; a worker whose record is older than
    3 beat intervals is listed apart as gone, not as live; the overview's running count is
    the live workers' busy slots, not the server's leases."""
    now = time.time()
    backend = env.queue.backend
    live = WorkerRegistry(backend, "w-live", queue=env.queue.name, concurrency=4, interval=5)
    live.beat({"state": "running", "executing": 3, "in_flight": 12, "processed": 7, "failed": 2})
    gone = WorkerRegistry(backend, "w-gone", concurrency=2, interval=1, clock=lambda: now - 10)
    gone.beat({"state": "running", "executing": 2, "in_flight": 2})
    with env.client() as client:
        html = client.get("/workers").text
        live_table = html.split('id="live-workers"', 1)[1].split("</table>", 1)[0]
        gone_table = html.split('id="gone-workers"', 1)[1].split("</table>", 1)[0]
        assert 'data-worker="w-live"' in live_table
        assert "w-gone" not in live_table
        assert 'data-worker="w-gone"' in gone_table
        assert ">gone<" in gone_table
        cells = re.findall(r"<td[^>]*>([^<]*)</td>", live_table)
        assert cells[:4] == ["w-live", socket.gethostname(), str(os.getpid()), env.queue.name]
        assert cells[4:9] == ["running", "3/4", "12", "7", "2"], cells
        assert cells[9].endswith("s ago"), cells
        assert re.search(r'id="busy-total">3<', html)
        assert _count(client.get("/").text, "running") == 3


def test_secrets_are_not_shown(env: Env) -> None:
    from fairque_core.settings.config import mask_url

    target = mask_url("redis://user:hunter2@db.example:6379/0")
    with env.client(target=target, token="tok-should-not-appear") as client:
        for path in ("/", "/tenants", "/dlq", "/workers", "/schedules"):
            html = client.get(path).text
            assert "hunter2" not in html
            assert "tok-should-not-appear" not in html
        assert "db.example" in client.get("/").text


def test_static_assets_are_shipped(memory_env: Env) -> None:
    with memory_env.client() as client:
        script = client.get("/static/poll.js")
        assert script.status_code == 200
        assert "data-poll" in script.text
        assert client.get("/static/style.css").status_code == 200
        assert client.get("/static/../app.py").status_code == 404
        assert client.get("/nope").status_code == 404


def test_an_action_on_more_matches_than_it_takes_says_so(env: Env) -> None:
    """ "Purge all that match" stopped at ``dlq_scan_limit`` entries without a word (10,000 by
    default: 50 of 10,050 were left, the page said "purged: 10000")."""
    for n in range(3):
        dead_letter(env.queue, "carol", f"carol-dead-{n}")
    with env.client(token=TOKEN, dlq_scan_limit=2) as client:
        form = {"token": TOKEN, "scope": "matching", "failure_type": "failed"}
        first = client.post("/dlq/purge", data=form)
        assert "purged: 2" in first.text
        assert "run it again for the rest" in first.text
        second = client.post("/dlq/purge", data=form)
        assert "purged: 1" in second.text
        assert "run it again" not in second.text
        assert env.queue.list_dlq() == []
        assert client.get("/dlq?done=purged&n=" + "9" * 5000).status_code == 200  # not a 500


def test_a_newcomer_in_the_window_is_not_backlogged(env: Env) -> None:
    """A tenant with no ready work when the window opened is not backlogged over it: it counted
    as backlogged and a fair queue showed a Jain index of about 0.5."""
    q = env.queue
    for i in range(6):
        q.push(Task.create("old", task_id=f"old-{i}"))
    with env.client() as client:
        sampler = client.app.state.dashboard.sampler  # type: ignore[attr-defined]
        client.portal.call(sampler.sample)  # type: ignore[union-attr]
        q.push(Task.create("new", task_id="new-0"))
        q.push(Task.create("new", task_id="new-1"))
        for _ in range(3):
            task = q.claim(["old"])
            assert task is not None
            q.finish(task)
        client.portal.call(sampler.sample)  # type: ignore[union-attr]
        window = sampler.fairness()
        assert window is not None
        assert window.backlogged == ("old",)
        assert window.dispatches == {"old": 3, "new": 0}
        assert window.jain == pytest.approx(1.0)


def test_a_dashboard_on_loopback_answers_only_to_its_names(memory_env: Env) -> None:
    """A page of another site can reach 127.0.0.1 under its own name (DNS rebinding) and read
    the dashboard as same-origin; the Host header tells it apart: 400."""
    from fairque_dashboard.security import LOOPBACK_HOSTS

    with memory_env.client(allowed_hosts=(*LOOPBACK_HOSTS, "queue.example")) as client:
        for host in ("127.0.0.1:8700", "localhost", "[::1]:8700", "QUEUE.example:443"):
            assert client.get("/", headers={"host": host}).status_code == 200, host
        for host in ("rebind.evil.example:8700", "127.0.0.1.evil.example", "", "[::1"):
            page = client.get("/tasks/t1", headers={"host": host})
            assert page.status_code == 400, host
    with memory_env.client() as client:  # none configured: any host (tests, proxies)
        assert client.get("/", headers={"host": "anything.example"}).status_code == 200


def test_one_tenants_damaged_keys_do_not_take_the_tenants_page_down(env: Env) -> None:
    """A counter of one tenant changed behind the queue's back (a bare ValueError), or a task
    key of another type under the fairness read (a DamagedKeyError): the page was a 500 for
    every tenant. Now that tenant's row says it is unreadable and the others are shown."""
    if env.kind == "memory":
        pytest.skip("damages a server's keys")
    import redis

    for tenant in ("acme", "globex"):
        env.queue.push(Task.create(tenant, task_id=f"{tenant}-1"))
    prefix = f"fq:{{{env.queue.name}}}:"
    with redis.Redis.from_url(env.url) as raw:
        raw.hset(prefix + "ts:acme", "pushed", "abc")
        with env.client() as client:
            page = client.get("/tenants")
            assert page.status_code == 200
            assert re.findall(r'data-tenant="([^"]+)"', page.text) == ["acme", "globex"]
            assert "unreadable (fairque doctor)" in page.text
            overview = client.get("/")
            assert overview.status_code == 200
        raw.hset(prefix + "ts:acme", "pushed", "1")
        raw.delete(prefix + "task:acme-1")
        raw.set(prefix + "task:acme-1", "x")  # a key of another type
        with env.client() as client:
            page = client.get("/tenants")
            assert page.status_code == 200
            assert 'data-tenant="globex"' in page.text


def test_a_capped_tenant_is_limited_and_left_out_of_the_jain_index(env: Env) -> None:
    """A tenant its own cap holds is listed as limited (cap) on the overview and the tenants
    page and is not compared: the two others split the dispatches evenly, Jain 1.0 (counted
    as owed a third, it read 0.67; ADR 67)."""
    q = env.queue
    q.set_tenant_limits("capped", max_running=1)
    for tenant in ("capped", "a", "b"):
        for i in range(12):
            q.push(Task.create(tenant, task_id=f"{tenant}-{i}"))
    assert q.claim(["capped"]) is not None  # its one slot, held throughout
    with env.client() as client:
        sampler = client.app.state.dashboard.sampler  # type: ignore[attr-defined]
        client.portal.call(sampler.sample)  # type: ignore[union-attr]
        for _ in range(8):
            task = q.claim()
            assert task is not None
            q.finish(task)
        client.portal.call(sampler.sample)  # type: ignore[union-attr]
        window = sampler.fairness()
        assert window is not None
        assert window.limited == {"capped": "cap"}
        assert set(window.backlogged) == {"a", "b"}
        assert window.fair_share("capped") is None
        assert window.jain == pytest.approx(1.0)
        overview = client.get("/?partial=live").text
        assert 'data-limited="capped">capped (cap)<' in overview
        assert ">1.0000<" in overview
        page = client.get("/tenants").text
        row = re.search(r'<tr data-tenant="capped">.*?</tr>', page, re.S)
        assert row is not None
        assert '<td data-col="limited">cap</td>' in row.group(0)
        other = re.search(r'<tr data-tenant="a">.*?</tr>', page, re.S)
        assert other is not None
        assert '<td data-col="limited">-</td>' in other.group(0)
