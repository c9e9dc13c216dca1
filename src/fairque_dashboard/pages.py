"""Pages: overview, tenants, task, workers, schedules, and their actions."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from typing import Any

import attrs
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fairque_core.domain.enums import TaskState
from fairque_core.domain.errors import TaskSerializationError, TaskValidationError
from fairque_core.domain.task_records import TaskAttempt, TaskRecord
from fairque_core.domain.validation import validate_id
from fairque_dashboard import figures
from fairque_dashboard.board import (
    choice_param,
    dashboard_of,
    first,
    int_param,
    redirect,
)
from fairque_dashboard.charts import line_chart
from fairque_dashboard.workers import read_workers

__all__ = ["routes"]

CHART_SPAN_SECONDS = 300.0
#: A tenants page reads each tenant's stats (one call each, 16 in flight): 200 keeps a page
#: under 200 ms on a busy server (bench/bench_dashboard.py).
MAX_TENANT_PAGE = 200
#: Entries of the DLQ the task page reads to find a failed task's error.
ERROR_SCAN_LIMIT = 2000

DONE_MESSAGES = {
    "weight": "weight set",
    "paused": "tenant paused: claims skip it until it is resumed",
    "resumed": "tenant resumed",
    "canceled": "task canceled",
    "not-canceled": "the task was not canceled (it had already ended)",
}


def routes() -> list[Route]:
    return [
        Route("/", overview),
        Route("/tenants", tenants),
        Route("/tenants/{tenant:path}/weight", set_weight, methods=["POST"]),
        Route("/tenants/{tenant:path}/pause", pause_tenant, methods=["POST"]),
        Route("/tenants/{tenant:path}/resume", resume_tenant, methods=["POST"]),
        # the action first: a task id may hold "/" (the path convertor), so "x/cancel" is
        # the cancel of "x" for a POST; a GET falls through to the task page.
        Route("/tasks/{task_id:path}/cancel", cancel_task, methods=["POST"]),
        Route("/tasks/{task_id:path}", task_page),
        Route("/workers", workers),
        Route("/schedules", schedules),
    ]


# ---------------------------------------------------------------------- overview


async def overview(request: Request) -> Response:
    board = dashboard_of(request)
    partial = choice_param(request, "partial", frozenset({"live"}), "")
    sampler = board.sampler
    assert sampler is not None
    if not sampler.samples:
        await sampler.ensure_recent()
    counts = await figures.queue_counts(board.queue, await read_workers(board.queue))
    fairness = sampler.fairness()
    charts = {
        "throughput": line_chart(
            sampler.rate_series("finished"),
            caption="tasks finished per second",
            span_seconds=CHART_SPAN_SECONDS,
        ),
        "claims": line_chart(
            sampler.rate_series("claimed"),
            caption="tasks claimed per second",
            span_seconds=CHART_SPAN_SECONDS,
        ),
        "failures": line_chart(
            sampler.failure_series(),
            caption="failed attempts / attempts ended",
            span_seconds=CHART_SPAN_SECONDS,
            percent=True,
        ),
    }
    template = "overview_live.html" if partial else "overview.html"
    return board.render(
        request,
        template,
        counts=counts,
        fairness=fairness,
        charts=charts,
        sampler=sampler,
        refresh=board.settings.refresh_seconds,
    )


# ---------------------------------------------------------------------- tenants


TENANT_FILTERS = frozenset({"all", "backlogged", "running", "idle"})


async def tenants(request: Request) -> Response:
    board = dashboard_of(request)
    queue = board.queue
    size = int_param(request, "size", board.settings.page_size, low=1, high=MAX_TENANT_PAGE)
    page = int_param(request, "page", 1, low=1, high=10_000_000)
    sort = choice_param(request, "sort", figures.SORT_KEYS, "")
    direction = choice_param(request, "dir", frozenset({"asc", "desc"}), "desc")
    only = choice_param(request, "only", TENANT_FILTERS, "all")
    partial = choice_param(request, "partial", frozenset({"table"}), "")
    contains = request.query_params.get("contains", "")[:200]
    wanted = request.query_params.get("tenant", "").strip()
    if wanted:
        try:
            validate_id(wanted, "tenant")
        except TaskValidationError as exc:
            raise HTTPException(400, str(exc)) from exc
        names, total = [wanted], None
    else:
        names, total = await queue.list_tenants(limit=size, offset=(page - 1) * size)
    facts = await figures.gather_tenant_facts(queue, names, known_weights=board.weights_set)
    window = board.sampler.fairness() if board.sampler is not None else None
    if window is not None:
        facts = [
            attrs.evolve(
                f,
                share=window.share(f.tenant),
                fair_share=window.fair_share(f.tenant),
                held_in_window=window.limited.get(f.tenant, ""),
            )
            for f in facts
        ]
    rows = [figures.tenant_row(f) for f in facts]
    if contains:
        rows = [r for r in rows if contains in r.tenant]
    rows = [r for r in rows if _keep(r, only)]
    if sort:
        rows = figures.sort_rows(rows, sort, direction == "desc")
    scale = max([max(r.share or 0.0, r.fair_share or 0.0) for r in rows] + [0.0])
    pages = None if total is None else max(1, math.ceil(total / size))
    keys = [] if partial else await figures.key_limit_rows(queue)
    params = {
        "size": size,
        "sort": sort,
        "dir": direction,
        "only": only,
        "contains": contains,
    }
    return board.render(
        request,
        "tenants_table.html" if partial else "tenants.html",
        rows=rows,
        columns=figures.TENANT_COLUMNS,
        page=page,
        pages=pages,
        total=total,
        size=size,
        sort=sort,
        direction=direction,
        only=only,
        contains=contains,
        wanted=wanted,
        params=params,
        scale=scale,
        window=window,
        key_limits=keys,
        done=DONE_MESSAGES.get(request.query_params.get("done", "")),
        refresh=board.settings.refresh_seconds,
    )


def _keep(row: figures.TenantRow, only: str) -> bool:
    depth = row.values.get("depth")
    running = row.values.get("running")
    if only == "backlogged":
        return isinstance(depth, int) and depth > 0
    if only == "running":
        return isinstance(running, int) and running > 0
    if only == "idle":
        return not depth and not running
    return True


async def set_weight(request: Request) -> Response:
    board = dashboard_of(request)
    tenant = request.path_params["tenant"]
    form = await board.authorise(request)
    try:
        validate_id(tenant, "tenant")
        weight = float(first(form, "weight") or "")
        tier = int(first(form, "tier") or "0")
    except (TaskValidationError, ValueError) as exc:
        raise HTTPException(400, f"bad weight or tier: {exc}") from exc
    if not math.isfinite(weight):
        raise HTTPException(400, "weight must be a finite number")
    await board.queue.set_tenant_weight(tenant, weight, tier=tier)
    board.weights_set[tenant] = weight
    return redirect("/tenants", tenant=tenant, done="weight")


async def pause_tenant(request: Request) -> Response:
    return await _pause_or_resume(request, pause=True)


async def resume_tenant(request: Request) -> Response:
    return await _pause_or_resume(request, pause=False)


async def _pause_or_resume(request: Request, *, pause: bool) -> Response:
    board = dashboard_of(request)
    tenant = request.path_params["tenant"]
    await board.authorise(request)
    try:
        validate_id(tenant, "tenant")
    except TaskValidationError as exc:
        raise HTTPException(400, str(exc)) from exc
    if pause:
        await board.queue.pause(tenant)
    else:
        await board.queue.resume(tenant)
    return redirect("/tenants", tenant=tenant, done="paused" if pause else "resumed")


# ---------------------------------------------------------------------- task


async def task_page(request: Request) -> Response:
    board = dashboard_of(request)
    queue = board.queue
    task_id = request.path_params["task_id"]
    try:
        validate_id(task_id, "task id")
    except TaskValidationError as exc:
        raise HTTPException(400, str(exc)) from exc
    state = await queue.get_state(task_id)
    if state is None:
        raise HTTPException(404, f"no task {task_id!r} in queue {queue.name!r}")
    task: TaskRecord | None = None
    undecodable: str | None = None
    try:
        task = await queue.get_task(task_id)
    except TaskSerializationError as exc:
        undecodable = str(exc)
    limit = board.settings.payload_preview_bytes
    payload, payload_cut = (None, False)
    if task is not None and task.payload is not None:
        payload, payload_cut = preview(task.payload, limit)
    deps: list[tuple[str, TaskState | None]] = []
    if task is not None and task.depends_on:
        states = await asyncio.gather(*(queue.get_state(d) for d in task.depends_on[:100]))
        deps = list(zip(task.depends_on[:100], states, strict=True))
    children = None
    children_of = figures.feature(queue, "get_children")
    if children_of is not None:
        children = list(await children_of(task_id))
    result, result_cut = (None, False)
    if state is TaskState.FINISHED:
        result, result_cut = preview(
            task.result if task else await queue.get_result(task_id), limit
        )
    failure = await _dlq_entry(board, task_id) if state is TaskState.FAILED else None
    progress = None
    if task is not None and task.progress is not None:  # ctx.set_progress (issue 32)
        progress = preview(task.progress, limit)[0]
    return board.render(
        request,
        "task.html",
        task_id=task_id,
        state=state,
        task=task,
        progress=progress,
        undecodable=undecodable,
        payload=payload,
        payload_cut=payload_cut,
        result=result,
        result_cut=result_cut,
        deps=deps,
        children=children,
        failure=failure,
        attempts=[_attempt_item(a) for a in task.attempts] if task else [],
        done=DONE_MESSAGES.get(request.query_params.get("done", "")),
    )


def preview(value: object, limit: int) -> tuple[str, bool]:
    """``value`` as indented JSON text (repr for what JSON cannot say), cut at ``limit``."""
    text = json.dumps(value, indent=2, sort_keys=True, default=repr, ensure_ascii=False)
    if len(text) > limit:
        return text[:limit], True
    return text, False


def _attempt_item(attempt: TaskAttempt) -> dict[str, Any]:
    """An attempt as the task page shows it (the traceback as stored: at most
    ``outcomes.TRACEBACK_CHARS`` characters)."""
    return {
        "number": attempt.number,
        "worker_id": attempt.worker_id,
        "started_at": attempt.started_at,
        "ended_at": attempt.ended_at,
        "seconds": attempt.ended_at - attempt.started_at,
        "outcome": attempt.outcome,
        "error": f"{attempt.error_type}: {attempt.error_message}" if attempt.error_type else "",
        "traceback": attempt.traceback,
    }


async def _dlq_entry(board: Any, task_id: str) -> Any:
    """The DLQ entry of a failed task, from the first :data:`ERROR_SCAN_LIMIT` entries."""
    offset = 0
    while offset < ERROR_SCAN_LIMIT:
        entries = await board.queue.list_dlq(limit=500, offset=offset)
        for entry in entries:
            if entry.original_task.task_id == task_id:
                return entry
        if len(entries) < 500:
            return None
        offset += 500
    return None


async def cancel_task(request: Request) -> Response:
    board = dashboard_of(request)
    task_id = request.path_params["task_id"]
    await board.authorise(request)
    try:
        validate_id(task_id, "task id")
    except TaskValidationError as exc:
        raise HTTPException(400, str(exc)) from exc
    done = await board.queue.cancel(task_id)
    return redirect(f"/tasks/{task_id}", done="canceled" if done else "not-canceled")


# ---------------------------------------------------------------------- workers, schedules


async def workers(request: Request) -> Response:
    board = dashboard_of(request)
    view = await read_workers(board.queue)
    counts = await figures.queue_counts(board.queue, view)
    return board.render(request, "workers.html", view=view, counts=counts)


async def schedules(request: Request) -> Response:
    board = dashboard_of(request)
    lister = figures.feature(board.queue, "list_schedules")
    rows = None if lister is None else [_schedule_row(s) for s in await lister()]
    return board.render(request, "schedules.html", schedules=rows)


def _schedule_row(info: object) -> dict[str, Any]:
    """A ``ScheduleInfo`` as the page's columns: the schedule's own fields, what each tick
    pushes, and its times as numbers for the ``when`` filter (issue 31: the page printed
    the Schedule's repr and epoch floats). Another record: its fields as text."""
    schedule = getattr(info, "schedule", None)
    template = getattr(schedule, "template", None)
    if schedule is None or template is None:
        return {"other": _as_mapping(info)}
    payload = json.dumps(dict(template.payload), sort_keys=True, default=str)
    return {
        "name": schedule.name,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "misfire": getattr(schedule.misfire, "value", schedule.misfire),
        "jitter": schedule.jitter,
        "tenant": template.tenant,
        "task_name": template.task_name or "",
        "priority": getattr(template.priority, "name", template.priority),
        "payload": payload if len(payload) <= 200 else payload[:200] + "...",
        "added_at": getattr(info, "added_at", None),
        "last_fired": getattr(info, "last_fired", None),
        "next_at": getattr(info, "next_at", None),
    }


def _as_mapping(item: object) -> dict[str, str]:
    """A record of the queue API (attrs class, dataclass, mapping) as column -> text."""
    if attrs.has(type(item)):
        raw: Mapping[str, Any] = attrs.asdict(item, recurse=False)  # type: ignore[arg-type]
    elif isinstance(item, Mapping):
        raw = item
    elif hasattr(item, "__dict__"):
        raw = vars(item)
    else:
        raw = {"value": item}
    return {str(k): str(v)[:500] for k, v in raw.items()}
