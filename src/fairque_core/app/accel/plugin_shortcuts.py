"""The accelerator ``plugin_shortcuts``: skip a hook call whose answer is known.

The reference :class:`~fairque_core.app.plugins.host.PluginHost` asks every hook through
pluggy. With only the defaults registered (the common case), most of those calls answer
what is known in advance: the built-in JSON codec encodes and decodes, no plugin adds push
headers or listens to events, the default executor only calls the task. :class:`ShortcutHost`
notes, once per set of registered plugins, which hooks are so, and does what pluggy would do
without the dispatch (issue 17); every (un)register drops the note.

``tests/unit/test_accel_plugin_shortcuts.py`` shows that both hosts give the same results and
errors and call the same hooks in the same order, for several plugin sets. Off switch:
``FAIRQUE_ACCEL_OFF=plugin_shortcuts``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from fairque_core.app import context as task_context
from fairque_core.app.plugins.builtin import (
    JSON_CONTENT_TYPE,
    DefaultExecutor,
    JsonPayloadCodec,
    decode_json,
    encode_json,
    media_type,
)
from fairque_core.app.plugins.host import PluginHost
from fairque_core.domain.errors import FairQueueError, PluginError, TaskSerializationError
from fairque_core.settings.accel import Accelerators

if TYPE_CHECKING:
    from fairque_core.domain.models import Task

__all__ = ["ShortcutHost", "host_class"]

NAME = "plugin_shortcuts"


class _Known(NamedTuple):
    """What the registered plugins let a call skip."""

    json_encode: bool  # the built-in JSON codec is the only encoder: call it directly
    json_decode: bool  # ... the only decoder
    headers: bool  # some plugin adds push headers
    events: bool  # some plugin receives task events
    plain_execute: bool  # the default executor alone runs tasks: call the handler directly


class ShortcutHost(PluginHost):
    """A :class:`PluginHost` that skips the hook calls whose answer is known."""

    _known: _Known | None = None  # recomputed after every (un)register

    def _register(self, plugin: object, name: str | None) -> str:
        self._known = None
        return super()._register(plugin, name)

    def unregister(self, name: str) -> object | None:
        self._known = None
        return super().unregister(name)

    def _shortcut(self) -> _Known:
        found = self._known
        if found is None:
            found = self._known = _Known(
                json_encode=self._only("fairque_payload_encode", JsonPayloadCodec),
                json_decode=self._only("fairque_payload_decode", JsonPayloadCodec),
                headers=bool(self._hook("fairque_push_headers").get_hookimpls()),
                events=bool(self._hook("fairque_task_event").get_hookimpls()),
                plain_execute=self._only("fairque_task_execute", DefaultExecutor),
            )
        return found

    def _only(self, hook: str, kind: type) -> bool:
        """Whether ``kind``'s own method is the hook's one implementation (not a wrapper), so
        calling it directly is what pluggy would do."""
        impls = self._hook(hook).get_hookimpls()
        if len(impls) != 1:
            return False
        [impl] = impls
        return (
            not (impl.wrapper or impl.hookwrapper)
            and type(impl.plugin) is kind
            and getattr(impl.function, "__func__", None) is getattr(kind, hook, None)
        )

    def _codec_failed(self, hook: str, error: Exception) -> PluginError:
        """The error the pluggy path reports for the JSON codec's unexpected failure."""
        return PluginError(self._hook(hook).get_hookimpls()[0].plugin_name, hook, error)

    def encode(self, task: Task) -> tuple[bytes, str]:
        if (self._known or self._shortcut()).json_encode:
            try:
                return encode_json(task.payload), JSON_CONTENT_TYPE
            except FairQueueError:
                raise
            except Exception as exc:
                raise self._codec_failed("fairque_payload_encode", exc) from exc
        return super().encode(task)

    def decode(self, content_type: str, body: bytes) -> dict[str, Any]:
        if (self._known or self._shortcut()).json_decode:
            try:
                if (
                    content_type == JSON_CONTENT_TYPE
                    or media_type(content_type) == JSON_CONTENT_TYPE
                ):
                    return decode_json(body)
            except FairQueueError:
                raise
            except Exception as exc:
                raise self._codec_failed("fairque_payload_decode", exc) from exc
            raise TaskSerializationError(f"no codec plugin decodes content type {content_type!r}")
        return super().decode(content_type, body)

    def push_headers(self, task: Task, *, queue: str = "") -> dict[str, str]:
        if not (self._known or self._shortcut()).headers:
            return dict(task.headers)
        return super().push_headers(task, queue=queue)

    def has_event_listeners(self) -> bool:
        return (self._known or self._shortcut()).events

    def task_event(self, event: str, task: Task, queue: str, **info: Any) -> None:
        if (self._known or self._shortcut()).events:
            super().task_event(event, task, queue, **info)

    def execute(self, task: Task, call: Callable[[], object], *, queue: str = "") -> object:
        if (self._known or self._shortcut()).plain_execute:
            # what the default executor would do, without the hook call; the handler's
            # exception propagates unchanged, as through the hook
            return task_context.bind(task, call)()
        return super().execute(task, call, queue=queue)


def host_class(accel: Accelerators) -> type[PluginHost]:
    """What a composition root builds: :class:`ShortcutHost` when the switch is on."""
    return ShortcutHost if accel.on(NAME) else PluginHost
