"""The hook specifications a plugin implements, at the path the plugin docs name.

A plugin marks its implementations with :data:`hookimpl` (also ``fairque_core.hookimpl``)::

    from fairque_core.hookspecs import hookimpl

    class Audit:
        @hookimpl
        def fairque_task_event(self, event, task, queue, info): ...

The specifications live in :mod:`fairque_core.ports.hooks` (a port: the engine calls plugins
through it); this module re-exports them and imports nothing else, so a plugin that imports it
loads no engine module of its own accord.
"""

from __future__ import annotations

from fairque_core.ports.hooks import (
    PROJECT_NAME,
    TASK_EVENTS,
    fairque_configure,
    fairque_payload_decode,
    fairque_payload_encode,
    fairque_push_headers,
    fairque_retry_decide,
    fairque_task_event,
    fairque_task_execute,
    hookimpl,
    hookspec,
)

__all__ = [
    "PROJECT_NAME",
    "TASK_EVENTS",
    "fairque_configure",
    "fairque_payload_decode",
    "fairque_payload_encode",
    "fairque_push_headers",
    "fairque_retry_decide",
    "fairque_task_event",
    "fairque_task_execute",
    "hookimpl",
    "hookspec",
]
