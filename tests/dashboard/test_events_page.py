"""The Events page and /events.json (ADR 71): the page shows the queue's newest events and
picks up new ones on the next poll of its table; the JSON resumes by cursor."""

from __future__ import annotations

from fairque_core import Task

from .conftest import Env


def test_the_events_page_follows_the_log(seeded: Env) -> None:
    queue = seeded.queue
    with seeded.client() as client:
        page = client.get("/events")
        assert page.status_code == 200
        assert page.text.count('class="event-dead_lettered"') == 2  # carol's two
        assert "carol-dead-0" in page.text
        assert "boom for carol-dead-1" in page.text
        assert 'data-poll="/events?partial=table"' in page.text
        task = queue.claim(["alice"])
        assert task is not None
        queue.finish(task, {"hidden": "result"})
        table = client.get("/events?partial=table").text
        assert "<html" not in table
        assert table.index(task.task_id) < table.index("carol-dead-1")  # newest first
        assert 'class="event-completed"' in table
        assert "hidden" not in table


def test_events_json_resumes_by_cursor(seeded: Env) -> None:
    with seeded.client() as client:
        first = client.get("/events.json", params={"limit": 2}).json()
        types = [e["type"] for e in first["events"]]
        assert types == ["failed", "dead_lettered"]
        seeded.queue.push(Task.create("dave", task_id="dave-0"))
        assert seeded.queue.cancel("dave-0")
        rest = client.get("/events.json", params={"since": first["cursor"]}).json()
        assert [(e["type"], e["task_id"]) for e in rest["events"]] == [
            ("failed", "carol-dead-1"),
            ("dead_lettered", "carol-dead-1"),
            ("canceled", "dave-0"),
        ]
        assert client.get("/events.json", params={"since": rest["cursor"]}).json() == {
            "events": [],
            "cursor": rest["cursor"],
        }
        assert client.get("/events.json", params={"since": "nope"}).status_code == 400
