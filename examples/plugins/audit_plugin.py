"""An example fairque plugin: an audit trail of every task event.

Use it directly::

    from fairque_redis import connect
    audit = AuditPlugin()
    queue = connect(plugins=[audit])

or ship it in a package and declare it in that package's ``pyproject.toml`` so every fairque
process loads it::

    [project.entry-points.fairque]
    audit = "audit_plugin:AuditPlugin"
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import attrs

from fairque_core.domain.models import Task
from fairque_core.ports.hooks import hookimpl

__all__ = ["AuditPlugin", "AuditRecord"]


@attrs.frozen
class AuditRecord:
    """One line of the audit trail."""

    at: float
    event: str
    queue: str
    task_id: str
    tenant: str
    info: Mapping[str, str]


class AuditPlugin:
    """Keep the last ``limit`` task events in memory and log each one as JSON.

    Hooks must only record, never block: appending to a bounded list under a lock and one
    log call is all this does. A hook that raises is logged by fairque and never affects
    the task.
    """

    fairque_plugin_name = "example.audit"

    def __init__(self, limit: int = 10_000, logger: logging.Logger | None = None) -> None:
        self.limit = limit
        self.records: list[AuditRecord] = []
        self._lock = threading.Lock()
        self._log = logger or logging.getLogger("fairque.audit")
        self.queue_name = ""

    @hookimpl
    def fairque_configure(self, config: object) -> None:
        """Remember which queue we audit (any config with a ``name``)."""
        self.queue_name = str(getattr(config, "name", "") or "")

    @hookimpl
    def fairque_push_headers(self, headers: dict[str, str]) -> None:
        """Stamp each task with the wall-clock time it was pushed."""
        headers.setdefault("x-audit-pushed-at", f"{time.time():.6f}")

    @hookimpl
    def fairque_task_event(
        self, event: str, task: Task, queue: str, info: Mapping[str, Any]
    ) -> None:
        """Record the event (info values are stringified so the trail is plain text)."""
        record = AuditRecord(
            at=time.time(),
            event=event,
            queue=queue or self.queue_name,
            task_id=task.task_id,
            tenant=task.tenant,
            info={key: str(value) for key, value in info.items()},
        )
        with self._lock:
            self.records.append(record)
            if len(self.records) > self.limit:
                del self.records[: len(self.records) - self.limit]
        self._log.info(json.dumps(attrs.asdict(record), sort_keys=True))

    def events_for(self, task_id: str) -> list[str]:
        """The events seen for ``task_id``, oldest first."""
        with self._lock:
            return [r.event for r in self.records if r.task_id == task_id]
