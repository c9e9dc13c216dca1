"""The dashboard's ASGI application: error pages, security headers, the route table.

:func:`create_app` takes an open :class:`~fairque_core.AsyncFairQueue` or an
async function that opens one (called in the app's lifespan, on the server's event loop: a
Redis client is bound to the loop it was made on). A queue the app opened it also closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fairque_core import AsyncFairQueue
from fairque_core.domain.errors import (
    FairQueueError,
    RedisConnectionError,
    TaskNotFoundError,
    TaskValidationError,
)
from fairque_dashboard.board import HERE, Dashboard, DashboardSettings, QueueOpener
from fairque_dashboard.security import SECURITY_HEADERS, TOKEN_HEADER, check_read, host_allowed

__all__ = ["Dashboard", "DashboardSettings", "QueueOpener", "create_app"]


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
    """Adds :data:`SECURITY_HEADERS` to every response, refuses a request whose ``Host``
    is not one of ``allowed_hosts`` (400; see :func:`host_allowed`) and, given a
    ``read_token``, one that does not carry it (401; see :func:`check_read`)."""

    def __init__(
        self, app: ASGIApp, allowed_hosts: tuple[str, ...] = (), read_token: str | None = None
    ) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts
        self.read_token = read_token

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
        if self.read_token is not None:
            headers = Headers(scope=scope)
            if not check_read(
                headers.get("authorization"), headers.get(TOKEN_HEADER), self.read_token
            ):
                refused = PlainTextResponse(
                    "401 this dashboard needs the operator token to read",
                    401,
                    headers={"www-authenticate": 'Basic realm="fairque", charset="UTF-8"'},
                )
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
    from fairque_dashboard import dlq_pages, event_pages, pages, task_pages

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
        *task_pages.routes(),
        *pages.routes(),
        *dlq_pages.routes(),
        *event_pages.routes(),
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
    settings = board.settings
    app.add_middleware(
        SecurityHeaders,
        allowed_hosts=settings.allowed_hosts,
        read_token=settings.token if settings.auth_read else None,
    )
    return app


def route(path: str, endpoint: Callable[[Request], Awaitable[Response]], **kw: Any) -> Route:
    return Route(path, endpoint, **kw)
