"""``fairque limits set|show|clear TENANT`` on Valkey (ADR 28), and the config's limits: only
the worker and ``tenant apply`` write them; reading commands never do."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from fairque_cli.limits_cmd import limits_text
from fairque_cli.main import main
from fairque_core import Task, TenantQueueFullError
from fairque_core.domain.limits import Limits, LimitStatus
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


def test_set_show_clear(base: tuple[str, ...], server_url: str, queue_name: str) -> None:
    got = cli_json(*base, "limits", "set", "acme", "--max-running", "2", "--rate", "50")
    assert got["own"] == {"max_running": 2, "rate": 50.0, "burst": None, "max_queued": None}
    got = cli_json(*base, "limits", "set", "acme", "--burst", "10", "--max-queued", "3")
    assert got["own"] == {"max_running": 2, "rate": 50.0, "burst": 10, "max_queued": 3}
    with connect(server_url, queue=queue_name) as queue:
        queue.push_batch([Task.create("acme", payload={"k": k}) for k in range(3)])
        with pytest.raises(TenantQueueFullError):
            queue.push(Task.create("acme"))
        queue.claim_batch(3)
    shown = cli_json(*base, "limits", "show", "acme")
    assert (shown["running"], shown["queued"], shown["capped"]) == (2, 1, True)
    assert (shown["cap_hits"], shown["refusals"]) == (1, 1)
    assert 8 <= shown["tokens"] <= 10  # burst 10, two starts taken (refilling at 50/s)
    code, text = cli(*base, "limits", "show", "acme")
    assert code == 0
    assert "running     2 of 2 (capped)" in text
    assert "queued      1 of 3" in text
    assert "refusals 1" in text
    assert not shown["paused"]
    assert cli(*base, "pause", "--tenant", "acme")[0] == 0
    assert cli_json(*base, "limits", "show", "acme")["paused"] is True
    assert "tenant acme (paused" in cli(*base, "limits", "show", "acme")[1]
    assert cli(*base, "resume", "--tenant", "acme")[0] == 0
    got = cli_json(*base, "limits", "set", "acme", "--rate", "none", "--max-running", "none")
    assert got["own"] == {"max_running": None, "rate": None, "burst": 10, "max_queued": 3}
    assert not got["capped"]
    got = cli_json(*base, "limits", "clear", "acme")
    assert got["own"] == dict.fromkeys(("max_running", "rate", "burst", "max_queued"))
    code, text = cli(*base, "limits", "clear", "acme")
    assert code == 0
    assert "cleared" in text


def test_limits_before_the_first_push(base: tuple[str, ...]) -> None:
    got = cli_json(*base, "limits", "set", "newcomer", "--max-queued", "10")
    assert got["own"]["max_queued"] == 10
    assert (got["running"], got["queued"]) == (0, 0)


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--max-running", "0"], "--max-running: must be in [1, 1000000]"),
        (["--max-running", "-2"], "--max-running"),
        (["--rate", "nan"], "--rate: must be in [1e-09, 1000000]"),
        (["--rate", "1e-12"], "--rate: must be in [1e-09, 1000000]"),
        (["--rate", "inf"], "--rate"),
        (["--rate", "0"], "--rate"),
        (["--burst", "1.5"], "--burst: must be an integer or none"),
        (["--max-queued", "lots"], "--max-queued"),
        (["--max-queued", str(10**13)], "--max-queued"),
    ],
)
def test_bad_values_are_usage_errors_naming_the_flag(
    base: tuple[str, ...], flags: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        cli(*base, "limits", "set", "acme", *flags)
    assert info.value.code == 2
    assert needle in capsys.readouterr().err


def test_bad_tenant_and_missing_flags_are_one_line_errors(
    base: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(*base, "limits", "set", "a b", "--rate", "1")[0] == 1
    err = capsys.readouterr().err
    assert "invalid tenant 'a b'" in err
    assert err.count("\n") == 1
    assert cli(*base, "limits", "show", "{x}")[0] == 1
    assert cli(*base, "limits", "set", "acme")[0] == 2  # a usage error
    assert "needs at least one of --max-running" in capsys.readouterr().err
    assert cli(*base, "limits", "clear", "acme", "--rate", "2")[0] == 2


def test_config_limits_only_written_by_apply(
    base: tuple[str, ...], server_url: str, queue_name: str, tmp_path: Path
) -> None:
    config = tmp_path / "fq.yaml"
    config.write_text(
        f"queue:\n  name: {queue_name}\n  tenant_limits:\n    acme: {{max_running: 7}}\n"
        "  tiers:\n    free: {max_queued: 50}\n",
        encoding="utf-8",
    )
    with_config = (*base, "--config", str(config))
    for command in (["stats"], ["limits", "show", "acme"], ["tenants"]):
        assert cli(*with_config, *command)[0] == 0
    cli_json(*with_config, "limits", "set", "other", "--rate", "3")
    shown = cli_json(*with_config, "limits", "show", "acme")
    assert shown["effective"]["max_running"] is None  # nothing applied by reading commands
    assert cli(*with_config, "tenant", "apply")[0] == 0
    shown = cli_json(*with_config, "limits", "show", "acme")
    assert shown["own"]["max_running"] == 7
    assert shown["effective"]["max_queued"] == 50  # the tier default (rank 0)


def test_text_of_a_throttled_tenant() -> None:
    status = LimitStatus(
        tenant="a",
        own=Limits(rate=2.0),
        effective=Limits(rate=2.0, max_queued=9),
        running=0,
        queued=4,
        capped=False,
        next_start_at=1000.25,
        tokens=0,
        cap_hits=0,
        throttles=3,
        refusals=0,
    )
    text = "\n".join(limits_text(status, now=1000.0))
    assert "throttled: next start at" in text
    assert "(in 0.250 s)" in text
    assert "in force    rate 2/s, max_queued 9 (with tier defaults)" in text
    assert "queued      4 of 9" in text
    assert "paused" not in text
    paused = "\n".join(limits_text(attrs.evolve(status, paused=True), now=1000.0))
    assert paused.splitlines()[0] == "tenant a (paused: claims skip it until resumed)"


def test_show_refuses_limit_flags(
    base: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    """``show`` with a flag printed the status unchanged, as if the flag had been set."""
    code, _ = cli(*base, "limits", "show", "acme", "--max-running", "3")
    assert code == 2  # a usage error
    assert "limits show takes no limit flags" in capsys.readouterr().err


# ---------------------------------------------------------------- limits by key (ADR 79)
def test_key_limits_set_show_clear(base: tuple[str, ...], server_url: str, queue_name: str) -> None:
    got = cli_json(*base, "limits", "set", "--key", "export", "--max-running", "1")
    assert got["limits"] == {"max_running": 1, "rate": None, "burst": None, "per_tenant": True}
    got = cli_json(*base, "limits", "set", "--key", "pay", "--rate", "20", "--global")
    assert got["limits"] == {"max_running": None, "rate": 20.0, "burst": None, "per_tenant": False}
    with connect(server_url, queue=queue_name) as queue:
        queue.push_batch([Task.create("acme", limit_key="export") for _ in range(3)])
        assert len(queue.claim_batch(3)) == 1
    code, text = cli(*base, "limits", "show", "--key", "export")
    assert code == 0
    assert "max_running 1 (per tenant)" in text
    assert "acme        running 1, parked 2" in text
    got = cli_json(*base, "limits", "clear", "--key", "export")
    assert (got["limits"], got["parked"]) == (None, {})


@pytest.mark.parametrize(
    "args",
    [
        ("set", "--key", "bad key", "--max-running", "1"),
        ("set", "--key", "k", "--max-running", "0"),
        ("set", "--key", "k", "--rate", "-1"),
        ("set", "--key", "k"),
        ("set", "--key", "k", "--max-queued", "3"),
        ("set", "acme", "--key", "k", "--max-running", "1"),
        ("show", "--key", "k", "--global"),
        ("set", "acme", "--global", "--max-running", "1"),
        ("show",),
    ],
)
def test_key_limits_refusals(base: tuple[str, ...], args: tuple[str, ...]) -> None:
    try:  # argparse's own refusals exit; the command's return their code
        code, _text = cli(*base, "limits", *args)
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]
    assert code not in (0, None)


def test_tenants_lists_the_limit_keys(base: tuple[str, ...]) -> None:
    code, text = cli(*base, "tenants")
    assert code == 0
    assert "limit key" not in text
    assert cli(*base, "limits", "set", "--key", "export", "--max-running", "1")[0] == 0
    assert cli(*base, "limits", "set", "--key", "pay", "--rate", "20", "--global")[0] == 0
    code, text = cli(*base, "tenants")
    assert code == 0
    assert "limit key export: max_running 1 (per tenant)" in text
    assert "limit key pay: rate 20/s (across all tenants)" in text
    got = cli_json(*base, "tenants")
    assert got["key_limits"]["export"] == {
        "max_running": 1,
        "rate": None,
        "burst": None,
        "per_tenant": True,
    }
