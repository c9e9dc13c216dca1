"""What the engine's mixins use of the engine, declared once (:class:`MixinHost`).

Each mixin module (acks, intake, reads, results, schedules) has :class:`MixinHost` as its base
for the type checker only (no runtime base), so mypy checks the mixins' calls against it and
the engine's members against it. It lives apart from the engine so that no mixin imports the
module that imports it (no import circle).
"""

# host.py is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from fairque_core.app.engine import support as common
from fairque_core.app.engine.handles_async import AsyncResultSource, AsyncTaskHandle
from fairque_core.app.engine.messages import ModelBuild
from fairque_core.domain.models import Claimed, Message, Task
from fairque_core.ports import AsyncQueueBackend
from fairque_core.settings.config import QueueConfig

__all__ = ["MixinHost"]


class Coalescer(Protocol):  # unasync: remove
    """ADR 35's group commit (an accelerator): the engine calls these two."""  # unasync: remove

    # unasync: remove
    async def push(self, task: Task, message: Message) -> AsyncTaskHandle: ...  # unasync: remove
    async def settle(self) -> None: ...  # unasync: remove


class MixinHost(AsyncResultSource, Protocol):
    """What the engine's mixins (acks, intake, reads, results, schedules) use of the engine,
    declared once: each mixin has it as its base for the type checker only (no runtime base),
    so mypy checks the mixins' calls against it and the engine's members against it."""

    @property
    def _backend(self) -> AsyncQueueBackend: ...

    _config: QueueConfig
    _plugins: common.PluginHostLike
    _build: ModelBuild
    coalesce_pushes: bool  # unasync: remove
    _intake_coalescer: Coalescer  # unasync: remove

    def _event(self, event: str, task: Task, **info: Any) -> None: ...

    async def _send(self, messages: Sequence[Message]) -> list[tuple[bool, str]]: ...

    async def _send_intake(self, messages: Sequence[Message]) -> list[tuple[bool, str]]: ...

    def _handles(
        self, tasks: Sequence[Task], outcomes: Sequence[tuple[bool, str]], *, intake: bool = False
    ) -> list[AsyncTaskHandle]: ...

    def _listening(self) -> bool: ...

    async def _send_each(
        self, messages: Sequence[Message], *, intake: bool = False
    ) -> list[tuple[bool, str] | Exception]: ...

    def _intake_handles(
        self, tasks: Sequence[Task], outcomes: Sequence[tuple[bool, str]]
    ) -> list[AsyncTaskHandle]: ...

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> QueueConfig: ...

    @property
    def plugins(self) -> common.PluginHostLike: ...

    async def claim_batch(
        self,
        count: int,
        assigned: Sequence[str] | None = None,
        *,
        steal: Sequence[str] | None = None,
        worker_id: str = "",
    ) -> list[Task]: ...

    async def _claimed_tasks(
        self,
        claimed: Sequence[Claimed],
        count: int,
        assigned: Sequence[str] | None,
        steal: Sequence[str] | None,
        worker_id: str,
    ) -> list[Task]: ...
