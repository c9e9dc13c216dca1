"""The engine's argument checks: every public method of both engines checks what it was given
here before any plugin or backend call (issue 16, defect 6).

A bad argument is a :class:`~fairque_core.domain.errors.TaskValidationError` (a
``FairQueueError`` and a ``ValueError``) naming the parameter, never an ``AttributeError`` or
``TypeError`` from deep inside; a list of ids given as one str is refused, not read as one id
per character. No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fairque_core.domain.enums import FailureType
from fairque_core.domain.errors import LeaseLostError, TaskTypeError, TaskValidationError
from fairque_core.domain.models import Lease, Task
from fairque_core.domain.validation import check_count, check_finite, check_id_list, validate_id

__all__ = [
    "MAX_CLAIM_BATCH",
    "UnprintableError",
    "check_claim",
    "check_entry_ids",
    "check_error",
    "check_failure_type",
    "check_finish_items",
    "check_run_seconds",
    "check_run_seconds_list",
    "check_task",
    "check_tasks",
    "check_tenants",
    "lease_of",
]

#: The most tasks one claim asks the backend for; a larger ``count`` is clamped to it (a claim
#: hands out *up to* ``count`` tasks, and one script call must stay short on the server).
MAX_CLAIM_BATCH = 1000


def check_task(task: object, field: str = "task") -> Task:
    """``task`` if it is a :class:`Task`."""
    if not isinstance(task, Task):
        raise TaskTypeError(field, task, "must be a fairque_core.Task")
    return task


def lease_of(task: object) -> Lease:
    """The lease a claimed task carries (LeaseLostError when it carries none)."""
    checked = check_task(task)
    if checked.lease is None:
        raise LeaseLostError(checked.task_id)
    return checked.lease


def _sequence(value: object, field: str) -> list[Any]:
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Sequence):
        raise TaskTypeError(field, value, "must be a list")
    return list(value)


def check_tasks(tasks: object, field: str = "tasks") -> list[Task]:
    """``tasks`` as a list if it is a list or tuple of :class:`Task`."""
    items = _sequence(tasks, field)
    for item in items:
        check_task(item, field)
    return items


def check_finish_items(items: object) -> list[tuple[Task, object]]:
    """``finish_batch``'s items: a list of ``(task, result)`` pairs."""
    out: list[tuple[Task, object]] = []
    for item in _sequence(items, "items"):
        if not isinstance(item, tuple) or len(item) != 2:
            raise TaskTypeError("items", item, "must be (task, result) pairs")
        out.append((check_task(item[0], "items"), item[1]))
    return out


def check_xcom_items(tenant: object, items: object) -> tuple[str, list[tuple[str, str]]]:
    """``xcom_get_values``'s arguments: a tenant id and ``(task_id, key)`` pairs of ids
    and keys (str)."""
    out: list[tuple[str, str]] = []
    for item in _sequence(items, "items"):
        if not isinstance(item, tuple) or len(item) != 2:
            raise TaskTypeError("items", item, "must be (task_id, key) pairs")
        task_id, key = item
        if not isinstance(key, str):
            raise TaskTypeError("items", key, "an XCom key must be a str")
        out.append((validate_id(task_id, "task_id"), key))
    return validate_id(tenant, "tenant"), out


def check_tenants(tenants: object, field: str = "tenants") -> list[str]:
    """A list of tenant ids (``get_queue_sizes_batch``, ``get_tenant_weights``)."""
    return check_id_list(tenants, field)


def check_entry_ids(entry_ids: object) -> list[str] | None:
    """The DLQ entry ids of ``requeue_dlq``/``purge_dlq``; None means every entry."""
    return None if entry_ids is None else check_id_list(entry_ids, "entry_ids")


def check_claim(
    count: object, assigned: object, steal: object, worker_id: object
) -> tuple[int, list[str] | None, list[str] | None, str]:
    """``claim_batch``'s arguments: count (clamped to :data:`MAX_CLAIM_BATCH`), the tenant
    lists (None or a list of ids) and the worker id (``""`` or an id)."""
    wanted = check_count(count, "count", 1)
    tenants = None if assigned is None else check_id_list(assigned, "assigned")
    stolen = None if steal is None else check_id_list(steal, "steal")
    if worker_id != "":
        validate_id(worker_id, "worker_id")
    return min(wanted, MAX_CLAIM_BATCH), tenants, stolen, str(worker_id)


class UnprintableError(Exception):
    """Stands in for a handler's exception whose ``str()`` or ``repr()`` raises: the failure
    is recorded with this one (the original is its ``__cause__``), since the reason, the
    stored error record and retry policies all print the error. Such an exception used to
    escape ``fail`` on every try, and a worker retried that failure for ever."""


def check_error(error: object) -> BaseException:
    """``fail``'s error: an exception instance, which can be printed (else an
    :class:`UnprintableError` in its place)."""
    if not isinstance(error, BaseException):
        raise TaskTypeError("error", error, "must be an exception")
    try:
        str(error)
        repr(error)
    except Exception as exc:  # the handler's exception class is broken, not the task
        stand_in = UnprintableError(
            f"{type(error).__name__} (its str() or repr() raised {type(exc).__name__})"
        )
        stand_in.__cause__ = error
        return stand_in.with_traceback(error.__traceback__)
    return error


def check_run_seconds(seconds: object) -> float | None:
    """A handler's run time: None, or a finite number >= 0."""
    if seconds is None:
        return None
    value = check_finite(seconds, "run_seconds")
    if value < 0:
        raise TaskValidationError("run_seconds", seconds, "must be >= 0")
    return value


def check_run_seconds_list(seconds: object, count: int) -> list[float | None] | None:
    """``finish_batch``'s run times: None, or one per item."""
    if seconds is None:
        return None
    values = [check_run_seconds(item) for item in _sequence(seconds, "run_seconds")]
    if len(values) != count:
        raise TaskValidationError("run_seconds", seconds, f"must give one time per item ({count})")
    return values


def check_failure_type(value: object) -> FailureType | None:
    """``list_dlq``'s filter: None, a FailureType, or its value (``"failed"``)."""
    if value is None or isinstance(value, FailureType):
        return value
    if isinstance(value, str):
        for member in FailureType:
            if member.value == value:
                return member
    known = ", ".join(member.value for member in FailureType)
    raise TaskValidationError("failure_type", value, f"must be a FailureType ({known}) or None")
