"""Who may reach the dashboard: the Host check against DNS rebinding for every spelling of a
loopback address, and ``--auth-read``, under which every page needs the operator token."""

from __future__ import annotations

import base64
import re

import pytest
from starlette.routing import Mount, Route

from fairque_core import Task
from fairque_dashboard import DashboardSettings, create_app
from fairque_dashboard.security import LOOPBACK_HOSTS, host_allowed, is_loopback_host

from .conftest import TOKEN, Env

LOOPBACK_SPELLINGS = (
    "127.0.0.1",
    "127.0.0.2",
    "127.1",
    "2130706433",
    "0x7f.1",
    "localhost",
    "localhost.",
    "LOCALHOST",
    "app.localhost",
    "::1",
    "[::1]",
    "::ffff:127.0.0.1",
    "0:0:0:0:0:0:0:1",
)
FOREIGN = (
    "rebind.evil.example",
    "127.0.0.1.evil.example",
    "localhost.evil.example",
    "128.0.0.1",
    "10.0.0.1",
    "::ffff:10.0.0.1",
    "::2",
    "0.0.0.0",
    "",
    "127.0.0.1 evil",
)


@pytest.mark.parametrize("name", LOOPBACK_SPELLINGS)
def test_every_spelling_of_a_loopback_address_is_loopback(name: str) -> None:
    assert is_loopback_host(name)


@pytest.mark.parametrize("name", FOREIGN)
def test_other_names_are_not_loopback(name: str) -> None:
    assert not is_loopback_host(name)


def test_a_loopback_dashboard_refuses_foreign_hosts_whatever_loopback_spelling_it_binds() -> None:
    """The DNS-rebinding check held only when ``--host`` was spelled 127.0.0.1, localhost or
    ::1; the command now treats every loopback spelling alike (see test_cli), and the check
    accepts a loopback Host in any spelling but never another site's name."""
    for host in LOOPBACK_SPELLINGS:
        header = f"[{host}]:8700" if ":" in host and not host.startswith("[") else host
        assert host_allowed(header, LOOPBACK_HOSTS), header
    for host in FOREIGN:
        assert not host_allowed(f"{host}:8700" if host else "", LOOPBACK_HOSTS), host
    assert host_allowed("queue.example.:443", ("queue.example",))
    assert not host_allowed("127.0.0.1", ("queue.example",))  # loopback only when allowed


def _paths(settings: DashboardSettings, env: Env) -> list[tuple[str, str]]:
    """Every route of the app, with a value in each path parameter: (method, path)."""
    app = create_app(env.opener, settings)
    found: list[tuple[str, str]] = []
    for route in app.routes:
        if isinstance(route, Mount):
            found.append(("GET", route.path + "/style.css"))
        elif isinstance(route, Route):
            path = re.sub(r"\{[^}]+\}", "t1", route.path)
            methods = route.methods or {"GET"}
            found.append(("GET" if "GET" in methods else "POST", path))
    assert len(found) >= 10, found  # the page table, not an empty list
    return found


def test_with_auth_read_every_route_refuses_a_request_without_the_token(memory_env: Env) -> None:
    memory_env.queue.push(Task.create("acme", task_id="t1"))
    settings = DashboardSettings(sample_interval=0, target="memory://", token=TOKEN, auth_read=True)
    app = create_app(memory_env.opener, settings)
    from starlette.testclient import TestClient

    basic = base64.b64encode(f"operator:{TOKEN}".encode()).decode()
    wrong = base64.b64encode(b"operator:guess").decode()
    with TestClient(app, raise_server_exceptions=False) as client:
        for method, path in _paths(settings, memory_env):
            for headers in ({}, {"authorization": f"Basic {wrong}"}, {"x-fairque-token": "no"}):
                page = client.request(method, path, headers=headers)
                assert page.status_code == 401, (method, path, headers)
                assert page.headers["www-authenticate"].startswith("Basic")
                assert "acme" not in page.text
        for headers in (
            {"authorization": f"Basic {basic}"},
            {"authorization": f"Bearer {TOKEN}"},
            {"x-fairque-token": TOKEN},
        ):
            page = client.get("/tasks/t1", headers=headers)
            assert page.status_code == 200, headers
            assert "acme" in page.text


def test_without_auth_read_pages_stay_readable_and_it_needs_a_token(memory_env: Env) -> None:
    with memory_env.client(token=TOKEN) as client:
        assert client.get("/").status_code == 200
    with pytest.raises(ValueError, match="token"):
        DashboardSettings(auth_read=True)
