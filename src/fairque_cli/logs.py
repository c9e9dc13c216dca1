"""Worker logs: ``--log-level`` / ``--log-format text|json`` and a plugin that says why a task
failed (task id, tenant, attempt, exception type and message, traceback).

The plugin sits around the handler call (``fairque_task_execute`` wrapper), so it sees the
exception with its traceback before the worker books the failure; the ``retried`` and ``dead``
events then say what became of the task.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
import traceback
from collections.abc import Generator, Mapping
from typing import Any, TextIO

from fairque_core import Task
from fairque_core.ports.hooks import hookimpl

__all__ = ["LOG_FORMATS", "TaskLogPlugin", "configure_logging"]

LOG_FORMATS = ("text", "json")
TASK_LOGGER = "fairque.task"
_FIELDS = ("task_id", "tenant", "task_name", "attempt", "exc_type", "exc_message", "queue")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the task fields, traceback."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in _FIELDS:
            value = getattr(record, field, None)
            if value is not None:
                data[field] = value
        if record.exc_info and record.exc_info[0] is not None:
            data.setdefault("exc_type", record.exc_info[0].__name__)
            data["traceback"] = "".join(traceback.format_exception(*record.exc_info))
        return json.dumps(data, default=str)


def configure_logging(level: str, fmt: str, stream: TextIO | None = None) -> None:
    """Send ``fairque.*`` logs to stderr at ``level`` in the ``text`` or ``json`` format."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    logger = logging.getLogger("fairque")
    for old in list(logger.handlers):
        if getattr(old, "_fairque_cli", False):
            logger.removeHandler(old)
    handler._fairque_cli = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False


def _task_fields(task: Task, queue: str) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "tenant": task.tenant,
        "task_name": task.name or None,
        "attempt": task.retry_count + 1,
        "queue": queue or None,
    }


class TaskLogPlugin:
    """Logs each failed attempt with its traceback, retries and dead-letter moves."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.log = logger or logging.getLogger(TASK_LOGGER)

    @hookimpl(wrapper=True)
    def fairque_task_execute(self, task: Task, queue: str) -> Generator[None, object, object]:
        try:
            return (yield)
        except BaseException as exc:
            fields = _task_fields(task, queue)
            fields.update(exc_type=type(exc).__name__, exc_message=str(exc))
            self.log.error(
                "task %s (tenant %s, attempt %d) failed: %s: %s",
                task.task_id,
                task.tenant,
                fields["attempt"],
                type(exc).__name__,
                exc,
                exc_info=(type(exc), exc, exc.__traceback__),
                extra=fields,
            )
            raise

    @hookimpl
    def fairque_task_event(
        self, event: str, task: Task, queue: str, info: Mapping[str, Any]
    ) -> None:
        fields = _task_fields(task, queue)
        if event == "retried":
            self.log.info(
                "task %s (tenant %s) will be retried in %.1f s",
                task.task_id,
                task.tenant,
                float(info.get("retry_delay") or 0.0),
                extra=fields,
            )
        elif event == "dead":
            self.log.warning(
                "task %s (tenant %s) moved to the dead-letter queue (%s): %s",
                task.task_id,
                task.tenant,
                info.get("failure_type"),
                info.get("error"),
                extra=fields,
            )
        elif event == "finished":
            self.log.debug(
                "task %s (tenant %s) finished in %.3f s",
                task.task_id,
                task.tenant,
                float(info.get("run_seconds") or 0.0),
                extra=fields,
            )
        elif event == "started":
            self.log.debug("task %s (tenant %s) started", task.task_id, task.tenant, extra=fields)
