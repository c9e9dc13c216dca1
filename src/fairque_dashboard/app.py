"""The dashboard's ASGI application: settings, shared state, error pages, the route table.

:func:`create_app` takes an open :class:`~fairque_core.app.engine.queue_async.AsyncFairQueue` or an
async function that opens one (called in the app's lifespan, on the server's event loop: a
Redis client is bound to the loop it was made on). A queue the app opened it also closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import attrs
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fairque_core.app.engine.queue_async import AsyncFairQueue
from fairque_core.domain.errors import (
    FairQueueError,
    RedisConnectionError,
    TaskNotFoundError,
    TaskValidationError,
)
from fairque_core.domain.validation import is_digits
from fairque_dashboard.sampler import Sampler
from fairque_dashboard.security import SECURITY_HEADERS, check_action, host_allowed

__all__ = ["Dashboard", "DashboardSettings", "QueueOpener", "create_app"]

HERE = Path(__file__).resolve().parent
QueueOpener = Callable[[], Awaitable[AsyncFairQueue]]

#: Largest form body an action accepts (a selection of a few thousand DLQ entries).
MAX_FORM_BYTES = 256 * 1024
MAX_PAGE_SIZE = 500


@attrs.frozen(kw_only=True)
class DashboardSettings:
    """What the command line decides. ``target`` is shown as is: pass a masked URL."""

    token: str | None = None
    target: str = ""
    sample_interval: float = 2.0
    tenant_sample_limit: int = 1000
    refresh_seconds: float = 2.0
    page_size: int = 50
    payload_preview_bytes: int = 4096
    dlq_scan_limit: int = 10_000
    #: Host names the dashboard answers to; any other ``Host`` header gets a 400 (DNS
    #: rebinding). Empty: any (``fairque dashboard`` sets the loopback names when it binds
    #: a loopback address, plus its ``--allowed-host`` names).
    allowed_hosts: tuple[str, ...] = ()


class Dashboard:
    """What every handler shares: the queue, the sampler, the settings, the templates."""

    def __init__(self, settings: DashboardSettings) -> None:
        self.settings = settings
        self._queue: AsyncFairQueue | None = None
        self.sampler: Sampler | None = None
        #: Weights set through this dashboard (the queue API has no weight read yet).
        self.weights_set: dict[str, float] = {}
        self.templates = Environment(
            loader=FileSystemLoader(str(HERE / "templates")),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.filters["n"] = format_value
        self.templates.filters["pct"] = format_percent
        self.templates.filters["when"] = format_time

    @property
    def queue(self) -> AsyncFairQueue:
        if self._queue is None:
            raise HTTPException(503, "the queue is not open yet")
        return self._queue

    def attach(self, queue: AsyncFairQueue) -> None:
        self._queue = queue
        self.sampler = Sampler(
            queue,
            interval=self.settings.sample_interval,
            tenant_limit=self.settings.tenant_sample_limit,
            weights=self.known_weights,
        )

    def known_weights(self) -> dict[str, float]:
        table = {t: w for t, (w, _tier) in self.queue.config.tenant_weight_table().items()}
        table.update(self.weights_set)
        return table

    @property
    def read_only(self) -> bool:
        return not self.settings.token

    def render(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> HTMLResponse:
        page = self.templates.get_template(template)
        body = page.render(
            request=request,
            settings=self.settings,
            read_only=self.read_only,
            queue_name=self._queue.name if self._queue is not None else "",
            path=request.url.path,
            **context,
        )
        return HTMLResponse(body, status_code=status)

    async def form(self, request: Request) -> dict[str, list[str]]:
        """The url-encoded form of an action (size-capped; no multipart)."""
        size = request.headers.get("content-length")
        if size is not None and (not is_digits(size) or int(size) > MAX_FORM_BYTES):
            raise HTTPException(413, "form too large")
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            raise HTTPException(413, "form too large")
        try:
            return parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20_000)
        except (UnicodeDecodeError, ValueError) as exc:
            raise HTTPException(400, "malformed form") from exc

    async def authorise(self, request: Request) -> dict[str, list[str]]:
        """The action's form, or a 403 when the token is missing or wrong."""
        form = await self.form(request)
        why = check_action(request, self.settings.token, first(form, "token"))
        if why is not None:
            raise HTTPException(403, why)
        return form


def dashboard_of(request: Request) -> Dashboard:
    board: Dashboard = request.app.state.dashboard
    return board


def first(form: Mapping[str, list[str]], name: str) -> str | None:
    values = form.get(name)
    return values[0] if values else None


def redirect(path: str, **params: object) -> RedirectResponse:
    query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
    return RedirectResponse(f"{path}?{query}" if query else path, status_code=303)


# ---------------------------------------------------------------------- query parameters


def int_param(
    request: Request, name: str, default: int, *, low: int = 0, high: int | None = None
) -> int:
    """An integer query parameter in [low, high]; a 400 page for anything else."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not is_digits(raw) or len(raw) > 9:
        raise HTTPException(400, f"{name} must be a whole number")
    value = int(raw)
    if value < low or (high is not None and value > high):
        limit = f" and {high}" if high is not None else ""
        raise HTTPException(400, f"{name} must be between {low}{limit}")
    return value


def choice_param(request: Request, name: str, choices: frozenset[str], default: str) -> str:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if raw not in choices:
        raise HTTPException(400, f"{name} must be one of: {', '.join(sorted(choices))}")
    return raw


# ---------------------------------------------------------------------- formatting


def format_value(value: object, fmt: str = "int") -> str:
    if value is None:
        return "n/a"
    if fmt == "seconds" and isinstance(value, (int, float)):
        return f"{value:.3g} s"
    if fmt == "float" and isinstance(value, (int, float)):
        return f"{value:g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def format_percent(value: object) -> str:
    if value is None or not isinstance(value, (int, float)):
        return "n/a"
    return f"{value * 100:.1f}%"


def format_time(value: object) -> str:
    import time

    if not isinstance(value, (int, float)) or value <= 0:
        return "n/a"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value)) + f" ({value:.3f})"


# ---------------------------------------------------------------------- errors


async def http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
    return _error_page(request, status, str(detail))


async def domain_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, TaskValidationError):
        return _error_page(request, 400, str(exc))
    if isinstance(exc, TaskNotFoundError):
        return _error_page(request, 404, str(exc))
    if isinstance(exc, RedisConnectionError):
        return _error_page(request, 503, f"cannot reach the queue's server: {exc}")
    return _error_page(request, 500, f"{type(exc).__name__}: {exc}")


async def any_error(request: Request, exc: Exception) -> Response:
    return _error_page(request, 500, f"internal error ({type(exc).__name__})")


def _error_page(request: Request, status: int, message: str) -> Response:
    board: Dashboard | None = getattr(request.app.state, "dashboard", None)
    if board is None:  # pragma: no cover - the state is set before any request
        return HTMLResponse(f"<h1>{status}</h1><p>{html.escape(message)}</p>", status)
    return board.render(request, "error.html", status=status, status_code=status, message=message)


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every response, and refuses a request whose ``Host``
    is not one of ``allowed_hosts`` (400; see :func:`host_allowed`)."""

    def __init__(self, app: ASGIApp, allowed_hosts: tuple[str, ...] = ()) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.allowed_hosts:
            host = Headers(scope=scope).get("host", "")
            if not host_allowed(host, self.allowed_hosts):
                refused = PlainTextResponse("400 this dashboard does not answer to that host", 400)
                await refused(scope, receive, send)
                return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                for name, value in SECURITY_HEADERS.items():
                    if name.encode() not in present:
                        headers.append((name.encode(), value.encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


# ---------------------------------------------------------------------- the app


def create_app(
    queue: AsyncFairQueue | QueueOpener, settings: DashboardSettings | None = None
) -> Starlette:
    """The dashboard for ``queue`` (or for the queue ``queue()`` opens at start-up)."""
    from fairque_dashboard import dlq_pages, pages

    board = Dashboard(settings or DashboardSettings())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        owned = not isinstance(queue, AsyncFairQueue)
        opened = await queue() if not isinstance(queue, AsyncFairQueue) else queue
        board.attach(opened)
        task: asyncio.Task[None] | None = None
        if board.sampler is not None and board.settings.sample_interval > 0:
            task = asyncio.create_task(board.sampler.run(), name="fairque-dashboard-sampler")
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if owned:
                await opened.close()

    routes = [
        *pages.routes(),
        *dlq_pages.routes(),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            HTTPException: http_error,
            FairQueueError: domain_error,
            Exception: any_error,
        },
    )
    app.state.dashboard = board
    app.add_middleware(SecurityHeaders, allowed_hosts=board.settings.allowed_hosts)
    return app


def route(path: str, endpoint: Callable[[Request], Awaitable[Response]], **kw: Any) -> Route:
    return Route(path, endpoint, **kw)
