"""The Tasks page (ADR 70): the tasks that ended, newest first, filtered by state and tenant,
a cursor to page on; bulk actions on a selection (requeue, purge, cancel) behind the operator
token and the CSRF checks of every action (``security.py``)."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fairque_core.domain.enums import TaskState
from fairque_core.domain.errors import TaskValidationError
from fairque_core.domain.task_records import LISTED_STATES, decode_cursor
from fairque_core.domain.validation import validate_id
from fairque_dashboard.board import MAX_PAGE_SIZE, dashboard_of, first, int_param, redirect

__all__ = ["routes"]

STATES = {s.value: s for s in LISTED_STATES}
ACTIONS = ("requeue", "purge", "cancel")
#: Tasks one bulk action takes.
MAX_SELECTION = 1000


def routes() -> list[Route]:
    # before the task page's /tasks/{task_id:path} (pages.py), which would take "bulk"
    return [
        Route("/tasks", tasks_page),
        Route("/tasks/bulk", bulk, methods=["POST"]),
    ]


def _filters(values: dict[str, str]) -> tuple[TaskState | None, str | None, str | None]:
    raw = values.get("state") or ""
    if raw and raw not in STATES:
        raise HTTPException(400, f"state must be one of: {', '.join(STATES)}")
    tenant = (values.get("tenant") or "").strip() or None
    cursor = values.get("cursor") or None
    try:
        if tenant is not None:
            validate_id(tenant, "tenant")
        decode_cursor(cursor)
    except TaskValidationError as exc:
        raise HTTPException(400, str(exc)) from exc
    return (STATES[raw] if raw else None), tenant, cursor


async def tasks_page(request: Request) -> Response:
    board = dashboard_of(request)
    state, tenant, cursor = _filters(dict(request.query_params))
    size = int_param(request, "size", board.settings.page_size, low=1, high=MAX_PAGE_SIZE)
    page = await board.queue.list_tasks(state=state, tenant=tenant, limit=size, cursor=cursor)
    params = {"state": state.value if state else "", "tenant": tenant or "", "size": str(size)}
    done = request.query_params.get("done", "")
    count = request.query_params.get("n", "")
    return board.render(
        request,
        "tasks.html",
        items=page.items,
        next_cursor=page.cursor,
        params=params,
        states=list(STATES),
        done=done if done in ACTIONS else None,
        count=int(count) if count.isdigit() and len(count) <= 9 else None,
    )


async def bulk(request: Request) -> Response:
    board = dashboard_of(request)
    form = await board.authorise(request)
    action = first(form, "action") or ""
    if action not in ACTIONS:
        raise HTTPException(400, f"action must be one of: {', '.join(ACTIONS)}")
    ids = [i for i in form.get("task", []) if i]
    if not ids:
        raise HTTPException(400, "no task selected")
    if len(ids) > MAX_SELECTION:
        raise HTTPException(400, f"at most {MAX_SELECTION} tasks per action")
    try:
        for task_id in ids:
            validate_id(task_id, "task id")
    except TaskValidationError as exc:
        raise HTTPException(400, str(exc)) from exc
    queue = board.queue
    if action == "cancel":
        count = sum([1 for task_id in ids if await queue.cancel(task_id)])
    else:
        # only failed tasks are DLQ entries: the others of the selection are left alone
        failed = [i for i in ids if await queue.get_state(i) is TaskState.FAILED]
        if action == "requeue":
            count = await queue.requeue_dlq(failed) if failed else 0
        else:
            count = await queue.purge_dlq(failed) if failed else 0
    back = {k: first(form, k) for k in ("state", "tenant", "size")}
    return redirect("/tasks", **back, done=action, n=count)
