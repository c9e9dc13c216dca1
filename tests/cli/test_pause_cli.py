"""``fairque pause|resume [--tenant T] [--json]`` on Valkey: claims skip a paused tenant or
queue, pushes are still accepted, resume restores it; bad input is one line and exit 1."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from fairque_cli.main import main
from fairque_core import Task
from fairque_redis import connect

pytestmark = pytest.mark.redis


def cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(args), stdout=out)
    return code, out.getvalue()


def cli_json(*args: str) -> Any:
    code, text = cli(*args, "--json")
    assert code == 0, text
    return json.loads(text)


@pytest.fixture
def base(server_url: str, queue_name: str) -> tuple[str, ...]:
    return ("--url", server_url, "--queue", queue_name)


def test_pause_and_resume_a_tenant(base: tuple[str, ...], server_url: str, queue_name: str) -> None:
    with connect(server_url, queue=queue_name) as queue:
        queue.push_batch(
            [Task.create(tenant_id, payload={"k": k}) for tenant_id in "ab" for k in range(3)]
        )
        got = cli_json(*base, "pause", "--tenant", "a")
        assert got == {
            "queue": queue_name,
            "tenant": "a",
            "action": "pause",
            "paused": True,
            "queue_paused": False,
        }
        assert queue.is_paused("a")
        assert {t.tenant for t in queue.claim_batch(10)} == {"b"}
        assert queue.push(Task.create("a"))  # pushes still accepted
        code, text = cli(*base, "resume", "--tenant", "a")
        assert code == 0
        assert text == f"resumed tenant 'a' of queue '{queue_name}'\n"
        assert [t.tenant for t in queue.claim_batch(10)] == ["a"] * 4


def test_pause_and_resume_the_queue(
    base: tuple[str, ...], server_url: str, queue_name: str
) -> None:
    with connect(server_url, queue=queue_name) as queue:
        queue.push(Task.create("a"))
        code, text = cli(*base, "pause")
        assert (code, text) == (0, f"paused queue '{queue_name}'\n")
        assert queue.is_paused()
        assert queue.claim_batch(5) == []
        assert queue.push(Task.create("b"))
        code, text = cli(*base, "pause", "--tenant", "c")
        assert "the whole queue" in text
        got = cli_json(*base, "resume")
        assert (got["tenant"], got["paused"], got["queue_paused"]) == (None, False, False)
        assert sorted(t.tenant for t in queue.claim_batch(5)) == ["a", "b"]
        assert queue.is_paused("c")


def test_bad_tenant_is_one_line_and_exit_1(
    base: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = cli(*base, "pause", "--tenant", "a b")
    assert code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "tenant" in err
