"""The example application's tasks: plain functions registered with ``@task``.

Both the producer (which builds tasks from them) and the worker (which runs them) import this
module, so the task names always agree. Handlers should be idempotent: fairque delivers at
least once.
"""

from __future__ import annotations

import time

from fairque_core.app.worker.handlers import TaskRegistry, task

registry = TaskRegistry()


@task("examples.thumbnail", registry=registry)
def thumbnail(image: str, width: int = 128) -> dict[str, object]:
    """Pretend to render a thumbnail (a few milliseconds of "work")."""
    time.sleep(0.005)
    return {"image": image, "width": width, "ok": True}


@task("examples.send_report", registry=registry, priority=4)
def send_report(email: str) -> str:
    """Pretend to e-mail a report."""
    time.sleep(0.002)
    return f"report sent to {email}"
