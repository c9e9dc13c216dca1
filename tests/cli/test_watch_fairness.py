"""The README's "Watch fairness live" recipe, followed as written (issue 33, item 5).

Three commands as real processes: the shared local server, the demo on a queue of its own on that
server, and the dashboard on that queue. The tenants page must show the fair-share marker of the
backlogged tenants while the demo's flood runs. The only change to the README's commands is the
dashboard's ``--port``: a free one instead of 8700, which another test run may hold.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from .conftest import REPO, child_env, run_cli

pytestmark = pytest.mark.redis

README = (REPO / "README.md").read_text(encoding="utf-8")
ROW = re.compile(r'<tr data-tenant="([^"]+)">(.*?)</tr>', re.DOTALL)
MARKER = re.compile(r'<line [^>]*class="marker"')
#: The demo's backlogged tenants through its flood (fairque_cli.metrics.plan_tenants).
BACKLOGGED = ("flood", "acme", "globex")


def _recipe() -> list[str]:
    """The recipe's three command lines, from the README's section."""
    section = README.split("## Watch fairness live", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _fairque(command: str, url: str = "") -> list[str]:
    """A README line (``uv run fairque ...``) as the argv of ``python -m fairque_cli``."""
    command = command.replace('"$(uv run fairque server url)"', url)
    words = command.split()
    assert words[:3] == ["uv", "run", "fairque"], command
    return [sys.executable, "-m", "fairque_cli", *words[3:]]


def _marked(page: str) -> dict[str, str]:
    """The tenants whose share bar has its fair-share marker, with their "share / fair" text."""
    out = {}
    for tenant, row in ROW.findall(page):
        if MARKER.search(row):
            found = re.search(r"<span>([^<]*)</span>\s*</td>", row)
            out[tenant] = found.group(1) if found else ""
    return out


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return str(reply.read().decode("utf-8"))


def test_the_recipe_names_the_commands_this_test_runs() -> None:
    start, demo, dashboard = _recipe()
    assert start == "uv run fairque server start"
    assert demo.startswith('uv run fairque --url "$(uv run fairque server url)" --queue demo-live')
    assert dashboard == "uv run fairque --queue demo-live dashboard --window 20"


@pytest.mark.slow  # the demo runs for most of its documented duration (90 s)
def test_watch_fairness_live_shows_the_fair_share_marker() -> None:
    start, demo_line, dashboard_line = _recipe()
    started = run_cli(_fairque(start)[3:])
    assert started.returncode == 0, started.stderr
    url = run_cli(["server", "url"]).stdout.strip()
    assert url.startswith("redis://127.0.0.1:")
    duration = float(re.search(r"--duration (\d+)", demo_line).group(1))  # type: ignore[union-attr]

    port = _free_port()
    began = time.monotonic()
    procs = [
        subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
            cwd=REPO,
        )
        for argv in (_fairque(demo_line, url), [*_fairque(dashboard_line), "--port", str(port)])
    ]
    demo = procs[0]
    page = ""
    try:
        deadline = began + duration + 30
        while time.monotonic() < deadline and demo.poll() is None:
            try:
                page = _get(f"http://127.0.0.1:{port}/tenants")
            except OSError:
                page = ""  # the dashboard is still starting
            if set(BACKLOGGED) <= set(_marked(page)):
                break
            time.sleep(1.0)
        shown = time.monotonic() - began
        marked = _marked(page)
        assert set(BACKLOGGED) <= set(marked), (
            f"the flood's backlogged tenants have no fair-share marker on /tenants after "
            f"{shown:.0f} s of a {duration:.0f} s demo: {marked}"
        )
        assert demo.poll() is None, "the marker showed only after the demo had ended"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in procs:
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    print(f"the markers showed {shown:.0f} s into the {duration:.0f} s demo: {marked}")
