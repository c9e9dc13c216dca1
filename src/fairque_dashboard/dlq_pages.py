"""The DLQ page: browse by tenant and failure type; requeue or purge one, a selection, or all
matching.

``list_dlq`` filters by failure type on the server; the tenant filter is applied here, walking
the DLQ in chunks up to ``dlq_scan_limit`` entries (the page says when it stopped early).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fairque_core import AsyncFairQueue
from fairque_core.domain.enums import FailureType
from fairque_core.domain.models import DLQEntry
from fairque_core.domain.validation import is_digits
from fairque_dashboard.board import (
    MAX_PAGE_SIZE,
    dashboard_of,
    first,
    int_param,
    redirect,
)

__all__ = ["routes"]

CHUNK = 500
FAILURE_TYPES = frozenset(f.value for f in FailureType)
DONE = {"requeued": "requeued", "purged": "purged"}


def routes() -> list[Route]:
    return [
        Route("/dlq", dlq_page),
        Route("/dlq/requeue", requeue, methods=["POST"]),
        Route("/dlq/purge", purge, methods=["POST"]),
    ]


@attrs.frozen(kw_only=True)
class DlqFilter:
    failure_type: FailureType | None
    tenant: str

    def matches(self, entry: DLQEntry) -> bool:
        return not self.tenant or entry.original_task.tenant == self.tenant

    def params(self) -> dict[str, str]:
        return {
            "failure_type": self.failure_type.value if self.failure_type else "",
            "tenant": self.tenant,
        }


def _filter(values: Mapping[str, str | None]) -> DlqFilter:
    raw_type = values.get("failure_type") or ""
    if raw_type and raw_type not in FAILURE_TYPES:
        raise HTTPException(400, f"failure_type must be one of: {', '.join(sorted(FAILURE_TYPES))}")
    tenant = (values.get("tenant") or "").strip()
    if len(tenant) > 256:
        raise HTTPException(400, "tenant is too long")
    return DlqFilter(failure_type=FailureType(raw_type) if raw_type else None, tenant=tenant)


async def matching(
    queue: AsyncFairQueue, flt: DlqFilter, *, offset: int, limit: int, scan_limit: int
) -> tuple[list[DLQEntry], bool, bool]:
    """Up to ``limit`` matching entries after skipping ``offset`` matches.

    Returns (entries, more: another match exists, capped: the scan stopped at ``scan_limit``).
    """
    if not flt.tenant:
        entries = await queue.list_dlq(
            limit=limit + 1, offset=offset, failure_type=flt.failure_type
        )
        return entries[:limit], len(entries) > limit, False
    found: list[DLQEntry] = []
    skipped = scanned = 0
    while scanned < scan_limit:
        chunk = await queue.list_dlq(limit=CHUNK, offset=scanned, failure_type=flt.failure_type)
        scanned += len(chunk)
        for entry in chunk:
            if not flt.matches(entry):
                continue
            if skipped < offset:
                skipped += 1
                continue
            if len(found) == limit:
                return found, True, False
            found.append(entry)
        if len(chunk) < CHUNK:
            return found, False, False
    return found, False, True


async def dlq_page(request: Request) -> Response:
    board = dashboard_of(request)
    flt = _filter(request.query_params)
    size = int_param(request, "size", board.settings.page_size, low=1, high=MAX_PAGE_SIZE)
    page = int_param(request, "page", 1, low=1, high=10_000_000)
    entries, more, capped = await matching(
        board.queue,
        flt,
        offset=(page - 1) * size,
        limit=size,
        scan_limit=board.settings.dlq_scan_limit,
    )
    done = DONE.get(request.query_params.get("done", ""))
    count = request.query_params.get("n", "")
    return board.render(
        request,
        "dlq.html",
        entries=entries,
        flt=flt,
        params=flt.params(),
        failure_types=sorted(FAILURE_TYPES),
        page=page,
        size=size,
        more=more,
        capped=capped,
        scan_limit=board.settings.dlq_scan_limit,
        done=done,
        count=int(count) if is_digits(count) and len(count) <= 18 else None,
        left=done is not None and request.query_params.get("left") == "1",
    )


async def _targets(request: Request) -> tuple[list[str] | None, DlqFilter, bool]:
    """What an action acts on: the selected entries, or every match of the filter.

    Returns (entry ids, or None for the whole DLQ; the filter; whether more entries match
    than one action takes: ``dlq_scan_limit``, so the page says to run it again).
    """
    board = dashboard_of(request)
    form = await board.authorise(request)
    flt = _filter({"failure_type": first(form, "failure_type"), "tenant": first(form, "tenant")})
    scope = first(form, "scope") or "selected"
    if scope == "selected":
        ids = [i for i in form.get("entry", []) if i]
        if not ids:
            raise HTTPException(400, "no entry selected")
        return ids, flt, False
    if scope != "matching":
        raise HTTPException(400, "scope must be 'selected' or 'matching'")
    if flt.failure_type is None and not flt.tenant:
        return None, flt, False
    entries, more, capped = await matching(
        board.queue, flt, offset=0, limit=board.settings.dlq_scan_limit, scan_limit=10**9
    )
    return [e.entry_id for e in entries], flt, more or capped


def _done(flt: DlqFilter, done: str, count: int, left: bool) -> Response:
    extra = {"left": "1"} if left else {}
    return redirect("/dlq", **flt.params(), done=done, n=count, **extra)


async def requeue(request: Request) -> Response:
    board = dashboard_of(request)
    ids, flt, left = await _targets(request)
    count = await board.queue.requeue_dlq(ids) if ids is None or ids else 0
    return _done(flt, "requeued", count, left)


async def purge(request: Request) -> Response:
    board = dashboard_of(request)
    ids, flt, left = await _targets(request)
    count = await board.queue.purge_dlq(ids) if ids is None or ids else 0
    return _done(flt, "purged", count, left)
