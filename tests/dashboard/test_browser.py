"""The dashboard in a real browser: Playwright driving Debian's Chromium against a live server.

The dashboard runs under uvicorn (a thread) over a queue on the session's Valkey; the browser
opens the overview, goes to the tenants, sorts, checks the share of a 3:1 weighted pair after a
drain, opens a DLQ entry, is refused an action with a wrong token, requeues the entry with the
right one and sees it gone (checked through the API too). A screenshot of each page is saved
under the test's tmp dir and one is checked to be non-blank; with FAIRQUE_DASHBOARD_SCREENSHOTS
set, the overview and tenants screenshots are also written to docs/img/ (for docs/dashboard.md).

Playwright's own browser download cannot run here: the test uses /usr/bin/chromium (Debian's
``chromium`` package, which ``.ci/run`` installs) and skips without it, unless CI is set.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fairque_core import AsyncFairQueue, FairQueue, FairQueueConfig, Task, TaskState
from fairque_core.app.backend_loading import open_async_backend, open_backend
from fairque_core.app.worker.registry import WorkerRegistry
from fairque_dashboard import DashboardSettings, create_app

from .conftest import TOKEN, dead_letter

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOT_ENV = "FAIRQUE_DASHBOARD_SCREENSHOTS"
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _need_chromium() -> None:
    if CHROMIUM.exists():
        return
    reason = f"Chromium not installed at {CHROMIUM} (apt-get install chromium)"
    if _in_ci():
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


class LiveServer:
    """uvicorn serving ``app`` on a free loopback port, in a thread."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self.server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        )
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the dashboard server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=20)
        self._socket.close()


@pytest.fixture
def live(valkey_server: Any) -> Iterator[tuple[LiveServer, FairQueue]]:
    _need_chromium()
    config = FairQueueConfig.from_dict(
        {
            "redis": {"url": str(valkey_server.url)},
            "queue": {
                "name": f"browser-{uuid.uuid4().hex[:10]}",
                "tenant_weights": {"heavy": 3.0, "light": 1.0},
            },
        },
        env={},
    )
    queue = FairQueue(open_backend(config))
    queue.apply_tenant_config()

    async def open_queue() -> AsyncFairQueue:
        return AsyncFairQueue(open_async_backend(config))

    settings = DashboardSettings(
        token=TOKEN, target=str(valkey_server.url), sample_interval=0.25, refresh_seconds=1.0
    )
    try:
        with LiveServer(create_app(open_queue, settings)) as server:
            yield server, queue
    finally:
        queue.close()


def _samples(server: LiveServer) -> int:
    board = server.server.config.app.state.dashboard
    return len(board.sampler.samples)


def _wait_samples(server: LiveServer, more: int) -> None:
    target = _samples(server) + more
    deadline = time.monotonic() + 20
    while _samples(server) < target:
        assert time.monotonic() < deadline, "the sampler took no new samples"
        time.sleep(0.05)


def test_dashboard_in_a_real_browser(live: tuple[LiveServer, FairQueue], tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    server, queue = live
    queue.add_schedule(
        "nightly-report", "0 3 * * *", {"tenant": "light", "task_name": "report", "payload": {}}
    )
    for i in range(40):
        queue.push(Task.create("heavy", task_id=f"heavy-{i}"))
        queue.push(Task.create("light", task_id=f"light-{i}"))
    dead_letter(queue, "broken", "broken-0", payload={"why": "<b>not bold</b>"})
    # the samples from before the pushes go: a tenant is backlogged over the window only when
    # it had ready work at its start (a newcomer is not judged until a window has passed)
    server.server.config.app.state.dashboard.sampler.samples.clear()
    _wait_samples(server, 2)
    for _ in range(20):  # a drain while both stay backlogged: 3:1 gives 15 and 5
        task = queue.claim()
        assert task is not None
        queue.finish(task)
    _wait_samples(server, 2)

    shots: dict[str, Path] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(15_000)

            def shot(name: str) -> None:
                shots[name] = tmp_path / f"{name}.png"
                page.screenshot(path=str(shots[name]), full_page=True)

            page.goto(server.url + "/")
            expect(page.locator("h1")).to_have_text("Overview")
            expect(page.locator('[data-count="DLQ"] .value')).to_have_text("1")
            expect(page.locator("svg.chart").first).to_be_visible()
            # the live part is replaced by the poller
            expect(page.locator("#live[data-polled]")).to_have_count(1, timeout=10_000)
            shot("overview")

            page.click("nav >> text=Tenants")
            expect(page.locator("h1")).to_have_text("Tenants")
            expect(page.locator('tr[data-tenant="heavy"]')).to_have_count(1)
            page.click('a[data-sort="depth"]')
            expect(page).to_have_url(re.compile(r"sort=depth"))
            order = page.locator("tr[data-tenant]").evaluate_all(
                "rows => rows.map(r => r.getAttribute('data-tenant'))"
            )
            assert order.index("light") < order.index("heavy")  # light has more left
            heavy_share = page.locator('tr[data-tenant="heavy"] td.share span').inner_text()
            light_share = page.locator('tr[data-tenant="light"] td.share span').inner_text()
            assert _percent(heavy_share, 0) == pytest.approx(75.0, abs=2.5), heavy_share
            assert _percent(heavy_share, 1) == pytest.approx(75.0, abs=0.1), heavy_share
            assert _percent(light_share, 0) == pytest.approx(25.0, abs=2.5), light_share
            shot("tenants")

            page.click("nav >> text=DLQ")
            expect(page.locator("h1")).to_have_text("Dead-letter queue")
            page.click("a[href='/tasks/broken-0']")
            expect(page.locator("#task-state")).to_have_text("failed")
            expect(page.locator("#payload")).to_contain_text("<b>not bold</b>")
            expect(page.locator("#payload b")).to_have_count(0)  # shown as text, not markup
            shot("task")
            page.go_back()

            row = page.locator('tr[data-entry] input[name="entry"]')
            expect(row).to_have_count(1)
            row.check()
            page.fill("fieldset.actions input[name=token]", "not-the-token")
            page.click("#requeue")
            expect(page.locator("#error-message")).to_contain_text("token")
            assert queue.get_state("broken-0") is TaskState.FAILED
            page.go_back()

            page.reload()
            page.locator('tr[data-entry] input[name="entry"]').check()
            page.fill("fieldset.actions input[name=token]", TOKEN)
            page.click("#requeue")
            expect(page.locator(".done")).to_contain_text("requeued: 1")
            expect(page.locator("tr[data-entry]")).to_have_count(0)
            expect(page.locator("#dlq-empty")).to_be_visible()
            shot("dlq")
            assert queue.get_state("broken-0") is TaskState.QUEUED

            # a worker with a long id and host on record: every column of its row is on screen
            # at 1280 px (issue 31: id, host, pid, queue, state, busy, leased, counters, seen)
            WorkerRegistry(
                queue.backend, "worker-" + "x" * 40, queue=queue.name, concurrency=16
            ).beat({"state": "running", "executing": 3, "in_flight": 9, "processed": 123456})
            page.click("nav >> text=Workers")
            expect(page.locator("h1")).to_have_text("Workers")
            expect(page.locator("#live-workers tbody tr")).to_have_count(1)
            expect(page.locator("#live-workers td.busy")).to_have_text("3/16")
            right = page.evaluate(
                "Math.max(...[...document.querySelectorAll('#live-workers th, #live-workers td')]"
                ".map(c => c.getBoundingClientRect().right))"
            )
            assert right <= 1280, right
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280
            shot("workers")
            page.click("nav >> text=Schedules")
            expect(page.locator("h1")).to_have_text("Schedules")
            row = page.locator('tr[data-schedule="nightly-report"]')
            expect(row).to_contain_text("0 3 * * *")
            expect(row).to_contain_text("UTC")
            assert "ScheduleInfo(" not in page.content()  # no Python reprs
            assert "Schedule(" not in page.content()
            shot("schedules")
            # a running task's progress (issue 32), on its page
            queue.push(Task.create("progress-t", task_id="prog-1"))
            running = queue.claim(["progress-t"])
            assert running is not None
            queue.set_progress(running, {"step": 3, "of": 10})
            page.goto(server.url + "/tasks/prog-1")
            expect(page.locator("#task-progress")).to_contain_text('"step": 3')
            # every page at 1280 px: nothing past the right edge, wide tables scroll inside
            # their own box (issue 31: the tenants table cut off its share column)
            for path in ("/", "/tenants", "/tasks", "/dlq", "/events", "/workers", "/schedules"):
                page.goto(server.url + path)
                width = page.evaluate("document.documentElement.scrollWidth")
                assert width <= 1280, (path, width)
                boxes = page.evaluate(
                    "[...document.querySelectorAll('div.scroll, main')]"
                    ".map(b => b.getBoundingClientRect().right)"
                )
                assert boxes, path
                assert max(boxes) <= 1280, (path, boxes)
        finally:
            browser.close()

    for path in shots.values():
        assert path.stat().st_size > 1000
    assert distinct_pixels(shots["tenants"].read_bytes()) > 8
    if os.environ.get(SCREENSHOT_ENV):
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        for name in ("overview", "tenants"):
            (DOCS_IMG / f"dashboard-{name}.png").write_bytes(shots[name].read_bytes())


def _percent(text: str, index: int) -> float:
    values = re.findall(r"([0-9.]+)%", text)
    return float(values[index])


def distinct_pixels(png: bytes, cap: int = 64) -> int:
    """How many distinct RGB(A) pixel values the first rows of a PNG hold (blank page: 1).

    A small reader for what Chromium writes (8-bit RGB/RGBA, no interlace): enough to tell a
    blank screenshot from a drawn one without an imaging library.
    """
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, data, width, channels = 8, b"", 0, 4
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind = png[pos + 4 : pos + 8]
        body = png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width = struct.unpack(">I", body[:4])[0]
            channels = {2: 3, 6: 4}[body[9]]
        elif kind == b"IDAT":
            data += body
        pos += 12 + length
    raw = zlib.decompress(data)
    stride = width * channels
    seen: set[bytes] = set()
    previous = bytearray(stride)
    for row_start in range(0, min(len(raw), 400 * (stride + 1)), stride + 1):
        kind = raw[row_start]
        line = bytearray(raw[row_start + 1 : row_start + 1 + stride])
        for i in range(stride):  # undo the PNG filters (None, Sub, Up, Average, Paeth)
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else (up if pb <= pc else corner)
                line[i] = (line[i] + pred) & 0xFF
        for x in range(0, stride, channels * 7):
            seen.add(bytes(line[x : x + channels]))
            if len(seen) >= cap:
                return len(seen)
        previous = line
    return len(seen)
