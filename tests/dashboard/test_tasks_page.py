"""The Tasks page (ADR 70) through an ASGI test client, on the model and Valkey: filters, the
cursor, bad parameters, the task page's attempts, and the bulk actions behind the token."""

from __future__ import annotations

import pytest

from fairque_core import TaskState

from .conftest import TOKEN, Env, dead_letter


def test_tasks_page_filters_and_pages_with_a_cursor(seeded: Env) -> None:
    q = seeded.queue
    running = q.claim(["alice"], worker_id="w-1")
    assert running is not None
    q.finish(running, {"ok": 1})
    q.cancel("alice-1")
    with seeded.client(token=TOKEN) as client:
        everything = client.get("/tasks")
        assert everything.status_code == 200
        for task_id in ("carol-dead-0", "carol-dead-1", running.task_id, "alice-1"):
            assert f'data-task="{task_id}"' in everything.text
        failed = client.get("/tasks", params={"state": "failed", "tenant": "carol"}).text
        assert failed.count("data-task=") == 2
        assert 'data-task="alice-1"' not in failed
        first = client.get("/tasks", params={"size": "1"})
        assert first.text.count("data-task=") == 1
        cursor = first.text.split('id="next" href="')[1].split('"')[0].replace("&amp;", "&")
        second = client.get(cursor)
        assert second.status_code == 200
        assert second.text.count("data-task=") == 1
        assert second.text.split("data-task=")[1] != first.text.split("data-task=")[1]
        page = client.get(f"/tasks/{running.task_id}").text
        assert page.count('class="attempt"') == 1
        assert "w-1" in page
        dead = client.get("/tasks/carol-dead-0").text
        assert "boom for carol-dead-0" in dead  # the traceback of its one attempt
        assert 'class="traceback"' in dead


@pytest.mark.parametrize(
    "query", ["state=queued", "state=nope", "cursor=nope", "tenant=a%20b", "size=0"]
)
def test_tasks_page_bad_parameters_are_400(memory_env: Env, query: str) -> None:
    with memory_env.client() as client:
        assert client.get(f"/tasks?{query}").status_code == 400


def test_bulk_actions_need_the_token_and_act_on_the_selection(env: Env) -> None:
    q = env.queue
    for k in range(3):
        dead_letter(q, "dave", f"dave-{k}")
    with env.client(token=TOKEN) as client:
        refused = client.post("/tasks/bulk", data={"action": "purge", "task": "dave-0"})
        assert refused.status_code == 403
        wrong = client.post(
            "/tasks/bulk", data={"action": "purge", "task": "dave-0", "token": "nope"}
        )
        assert wrong.status_code == 403
        foreign = client.post(
            "/tasks/bulk",
            data={"action": "purge", "task": "dave-0", "token": TOKEN},
            headers={"Origin": "http://evil.example"},
        )
        assert foreign.status_code == 403
        bad = client.post("/tasks/bulk", data={"action": "explode", "task": "x", "token": TOKEN})
        assert bad.status_code == 400
        none = client.post("/tasks/bulk", data={"action": "purge", "token": TOKEN})
        assert none.status_code == 400
        purged = client.post(
            "/tasks/bulk",
            data={"action": "purge", "task": ["dave-0", "nope"], "token": TOKEN},
            follow_redirects=False,
        )
        assert purged.status_code == 303
        assert "n=1" in purged.headers["location"]
        requeued = client.post(
            "/tasks/bulk", data={"action": "requeue", "task": "dave-1", "token": TOKEN}
        )
        assert requeued.status_code == 200
        assert "requeued: 1" in requeued.text
        canceled = client.post(
            "/tasks/bulk", data={"action": "cancel", "task": ["dave-1", "dave-2"], "token": TOKEN}
        )
        assert "canceled: 1" in canceled.text  # dave-1 was queued again; dave-2 is failed
    assert q.get_state("dave-0") is None
    assert q.get_state("dave-1") is TaskState.CANCELED
    assert q.get_state("dave-2") is TaskState.FAILED
