"""``fairque dashboard``: registered in the CLI, and a one-line error without its extra."""

from __future__ import annotations

import sys

import pytest

from fairque_cli.main import build_parser, main


def test_dashboard_command_is_registered() -> None:
    args = build_parser().parse_args(["dashboard", "--url", "memory://"])
    assert args.command == "dashboard"
    assert args.host == "127.0.0.1"
    assert args.port == 8700
    assert args.auth_token is None


def test_bad_port_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["dashboard", "--port", "99999"])
    assert exc.value.code == 2
    assert "not a port" in capsys.readouterr().err


def test_missing_extra_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    code = main(["dashboard", "--url", "memory://"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1
    assert "pip install fairque[dashboard]" in err
