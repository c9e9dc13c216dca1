"""``fairque schedule add|rm|ls`` against a real server (the session's Valkey)."""

from __future__ import annotations

import io
import json
import uuid
from typing import Any

import pytest

from fairque_cli.main import main

pytestmark = pytest.mark.redis


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), stdout=out)
    return code, out.getvalue()


def test_schedule_add_ls_rm(valkey_server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    target = ["--url", str(valkey_server.url), "--queue", "cli-" + uuid.uuid4().hex[:8]]
    code, out = run(
        "schedule",
        "add",
        "nightly",
        "30 2 * * *",
        "--tenant",
        "acme",
        "--task-name",
        "report",
        "--timezone",
        "Europe/Paris",
        "--misfire",
        "run_once",
        "--payload",
        '{"k": 1}',
        *target,
    )
    assert (code, out) == (0, "nightly\n")
    code, out = run("schedule", "ls", "--json", *target)
    [item] = json.loads(out)
    assert item["cron"] == "30 2 * * *"
    assert item["task"]["payload"] == {"k": 1}
    assert item["next_at"] is not None
    code, out = run("schedule", "ls", *target)
    assert "nightly" in out
    assert "Europe/Paris" in out
    # bad input: one line naming the field, nothing stored
    code, _ = run("schedule", "add", "bad", "61 * * * *", "--tenant", "acme", *target)
    assert code == 1
    assert "cron" in capsys.readouterr().err
    code, _ = run(
        "schedule", "add", "bad", "* * * * *", "--tenant", "a", "--timezone", "X/Y", *target
    )
    assert code == 1
    assert "timezone" in capsys.readouterr().err
    assert [i["name"] for i in json.loads(run("schedule", "ls", "--json", *target)[1])] == [
        "nightly"
    ]
    assert run("schedule", "rm", "nightly", *target) == (0, "removed nightly\n")
    assert run("schedule", "rm", "nightly", *target)[0] == 1
    assert run("schedule", "ls", *target)[1].startswith("no schedules")


def test_schedule_add_refuses_nan_and_takes_priority_names(
    valkey_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A NaN payload was stored (as invalid JSON) and then stopped every schedule; push
    took priority names and schedule add did not."""
    target = ["--url", str(valkey_server.url), "--queue", "cli-" + uuid.uuid4().hex[:8]]
    every = ("* * * * * *", "--tenant", "acme")
    code, _ = run("schedule", "add", "bad", *every, "--payload", '{"a": NaN}', *target)
    assert code == 1
    assert "--payload is not JSON" in capsys.readouterr().err
    code, out = run("schedule", "add", "named", *every, "--priority", "high", *target)
    assert (code, out) == (0, "named\n")
    code, out = run("schedule", "ls", "--json", *target)
    [item] = json.loads(out)
    assert item["task"]["priority"] == 4


def test_scheduler_checks_its_flags_before_it_saves_the_configs_schedules(
    valkey_server: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "cli-" + uuid.uuid4().hex[:8]
    config = tmp_path / "sched.yaml"
    config.write_text(
        f"queue:\n  name: {name}\nschedules:\n"
        "  - {name: cfg, cron: '* * * * *', task: {tenant: acme}}\n",
        encoding="utf-8",
    )
    target = ["--url", str(valkey_server.url), "--config", str(config)]
    with pytest.raises(SystemExit) as info:
        main(["scheduler", "--poll", "-1", *target])
    assert info.value.code == 2
    assert "--poll" in capsys.readouterr().err
    code, out = run("schedule", "ls", "--json", *target)
    assert (code, json.loads(out)) == (0, [])
