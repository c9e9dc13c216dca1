"""The events page (ADR 71): the queue's latest events, kept up to date from its event log.

The dashboard follows the log incrementally: each render of the page (and each poll of its
table) reads what was written after the last event it holds (``queue.events``'s reads, no
waiting) and keeps the newest :data:`KEPT` in memory, so the page shows live events without
reading the whole log again. ``/events.json?since=ID`` hands the log to scripts and other
pages as JSON (``{"events": [...], "cursor": ID}``), resumable by ``cursor``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fairque_core.domain.events import QueueEvent
from fairque_dashboard.board import MAX_PAGE_SIZE, choice_param, dashboard_of, int_param

__all__ = ["routes"]


def routes() -> list[Route]:
    return [Route("/events", events_page), Route("/events.json", events_json)]


async def events_page(request: Request) -> Response:
    board = dashboard_of(request)
    partial = choice_param(request, "partial", frozenset({"table"}), "")
    await board.events.refresh(board.queue)
    return board.render(
        request,
        "events_table.html" if partial else "events.html",
        events=board.events.newest(),
        refresh=board.settings.refresh_seconds,
        events_on=board.queue.config.events_maxlen > 0,
    )


async def events_json(request: Request) -> Response:
    board = dashboard_of(request)
    since = request.query_params.get("since") or "0"
    limit = int_param(request, "limit", 100, low=1, high=MAX_PAGE_SIZE)
    stream = board.queue.events(since, follow=False, count=limit)
    got: list[QueueEvent] = []
    async for event in stream:
        got.append(event)
        if len(got) >= limit:
            break
    cursor = got[-1].id if got else since
    return JSONResponse({"events": [e.as_dict() for e in got], "cursor": cursor})
