"""``fairque dashboard``: registered in the CLI, and a one-line error without its extra."""

from __future__ import annotations

import socket
import sys
import time

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


def test_an_empty_host_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["dashboard", "--host", " "])
    assert exc.value.code == 2
    assert "not empty" in capsys.readouterr().err


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    started = time.monotonic()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    assert time.monotonic() - started < 20
    return err


def test_what_would_stop_the_server_is_refused_before_it_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A host that does not resolve (uvicorn logged it and hung, deaf to SIGTERM), a port in
    use and an unreachable queue server (a traceback, exit status 3): one line, status 1."""
    err = _refused(["dashboard", "--url", "memory://", "--host", "no such host.invalid"], capsys)
    assert "does not resolve" in err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        err = _refused(["dashboard", "--url", "memory://", "--port", port], capsys)
    assert f"cannot listen on 127.0.0.1:{port}" in err
    err = _refused(["dashboard", "--url", "redis://127.0.0.1:1", "--port", "0"], capsys)
    assert "cannot reach the server" in err
