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


@pytest.mark.parametrize(
    ("flags", "allowed", "refused"),
    [
        ([], ["127.0.0.1:8700", "localhost:8700"], ["rebind.evil.example:8700"]),
        (
            ["--allowed-host", "queue.example"],
            ["queue.example", "[::1]:8700"],
            ["evil.example"],
        ),
    ],
)
def test_the_command_serves_loopback_names_only(
    monkeypatch: pytest.MonkeyPatch, flags: list[str], allowed: list[str], refused: list[str]
) -> None:
    """The app the command hands to uvicorn (captured, not served) refuses another site's
    Host when bound to 127.0.0.1 (DNS rebinding)."""
    import uvicorn
    from starlette.testclient import TestClient

    served: list[object] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **_: served.append(app))
    assert main(["--url", "memory://", "dashboard", "--port", "0", *flags]) == 0
    [app] = served
    with TestClient(app) as client:  # type: ignore[arg-type]
        for host in allowed:
            assert client.get("/", headers={"host": host}).status_code == 200, host
        for host in refused:
            assert client.get("/", headers={"host": host}).status_code == 400, host


def test_the_fairness_window_is_a_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert build_parser().parse_args(["dashboard"]).window == 60.0
    assert build_parser().parse_args(["dashboard", "--window", "20"]).window == 20.0
    err = _refused(["dashboard", "--url", "memory://", "--window", "3"], capsys)
    assert "--window must be from two samples" in err
    err = _refused(
        ["dashboard", "--url", "memory://", "--refresh", "0.2", "--window", "61"], capsys
    )
    assert "the 300 samples the dashboard keeps (60 s)" in err


def test_the_window_reaches_the_sampler() -> None:
    from fairque_core import AsyncFairQueue
    from fairque_core.memory import AsyncInMemoryBackend
    from fairque_dashboard.board import Dashboard, DashboardSettings

    board = Dashboard(DashboardSettings(fairness_window=20.0))
    board.attach(AsyncFairQueue(AsyncInMemoryBackend()))
    assert board.sampler is not None
    assert board.sampler.window_seconds == 20.0


@pytest.mark.parametrize("bind", ["127.0.0.2", "127.1", "2130706433"])
def test_every_loopback_spelling_of_host_turns_the_rebinding_check_on(
    monkeypatch: pytest.MonkeyPatch, bind: str
) -> None:
    """``--host 127.0.0.2`` (or ``127.1``, ``localhost.``) answered any Host: the check
    applied only to three exact spellings."""
    import uvicorn
    from starlette.testclient import TestClient

    served: list[object] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **_: served.append(app))
    assert main(["--url", "memory://", "dashboard", "--port", "0", "--host", bind]) == 0
    [app] = served
    with TestClient(app) as client:  # type: ignore[arg-type]
        assert client.get("/", headers={"host": f"{bind}:8700"}).status_code == 200
        assert client.get("/", headers={"host": "rebind.evil.example"}).status_code == 400


def test_auth_read_without_a_token_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FAIRQUE_DASHBOARD_TOKEN", raising=False)
    assert main(["--url", "memory://", "dashboard", "--port", "0", "--auth-read"]) == 2
    assert "--auth-read needs an operator token" in capsys.readouterr().err


def test_auth_read_from_the_command_refuses_tokenless_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import uvicorn
    from starlette.testclient import TestClient

    served: list[object] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **_: served.append(app))
    argv = ["--url", "memory://", "dashboard", "--port", "0", "--auth-token", "s3cret"]
    assert main([*argv, "--auth-read"]) == 0
    [app] = served
    with TestClient(app) as client:  # type: ignore[arg-type]
        local = {"host": "127.0.0.1:8700"}
        assert client.get("/", headers=local).status_code == 401
        assert client.get("/", headers={**local, "x-fairque-token": "s3cret"}).status_code == 200
