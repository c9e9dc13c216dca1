"""The accelerator ``prebuilt_builders``: models built without a second round of checks.

The reference path (:class:`~fairque_core.app.engine.messages.ModelBuild`) builds every
:class:`Task` and :class:`Message` through attrs, so the models' validators judge each value.
Here the same frozen objects are set slot by slot, as attrs' own ``__init__`` sets a frozen
slotted instance, without running the validators again (issue 17):

- :class:`PrebuiltBuild` decodes a claimed or stored message into a :class:`Task` after one
  derived check, on plain types only, of what the validators would accept (anything it does
  not vouch for, e.g. a str subclass, takes the reference path, which says what is wrong);
  and builds the pushed :class:`Message` (it has no validators) from positional values.
- ``unchecked_*`` are the builders themselves, also used by the Redis adapter's claim reply.

``tests/unit/test_accel_builders.py`` shows that both paths give equal models field by field
(hypothesis, valid and invalid values), with the switch on and off. Off switch:
``FAIRQUE_ACCEL_OFF=prebuilt_builders``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fairque_core.accel.builders import (
    unchecked_claimed,
    unchecked_lease,
    unchecked_message,
    unchecked_task,
)
from fairque_core.app.engine.messages import REFERENCE_BUILD, ModelBuild
from fairque_core.domain.enums import Priority
from fairque_core.domain.models import Lease, Message, Task, expiry_ms
from fairque_core.domain.validation import (
    MAX_EPOCH_SECONDS,
    MAX_ID_LENGTH,
    MAX_RETRY_COUNT,
    id_fullmatch,
    is_valid_id,
)
from fairque_core.settings.accel import Accelerators

__all__ = [
    "PREBUILT",
    "PrebuiltBuild",
    "model_build",
    "unchecked_claimed",
    "unchecked_lease",
    "unchecked_message",
    "unchecked_task",
]

NAME = "prebuilt_builders"


class PrebuiltBuild(ModelBuild):
    """:class:`ModelBuild` with the models set slot by slot where the values are known good."""

    def message(  # noqa: PLR0917 - ModelBuild.message's signature
        self,
        task: Task,
        body: bytes,
        content_type: str,
        delay: float,
        headers: dict[str, str],
        keep_result: bool = True,
    ) -> Message:
        return unchecked_message(
            task.task_id,
            task.tenant,
            task.priority,
            body,
            content_type,
            0,
            task.max_retries,
            task.created_at,
            delay,
            task.depends_on,
            headers,
            task.name,
            task.unique_key,
            task.unique_window_seconds,
            keep_result,
            expiry_ms(task.expires_at),
            task.limit_key,
        )

    def task(self, message: Message, payload: Mapping[str, Any], lease: Lease | None) -> Task:
        # Whether ``Task(...)`` of these fields would pass every validator, judged on plain
        # types only (anything else takes the reference path, which says why): spelled
        # inline, each field read once, as it runs once per claimed task (issue 17).
        task_id, tenant, priority = message.task_id, message.tenant, message.priority
        retries, max_retries, created = message.retry_count, message.max_retries, message.created_at
        delay, deps, name, headers = (
            message.delay,
            message.depends_on,
            message.name,
            message.headers,
        )
        unique_key, window = message.unique_key, message.unique_window
        expires, limit_key = message.expires_ms, message.limit_key
        if (
            (type(created) is float or type(created) is int)
            and (type(delay) is float or type(delay) is int)
            and 0.0 <= created <= MAX_EPOCH_SECONDS
            and type(task_id) is str
            and type(tenant) is str
            and len(task_id) <= MAX_ID_LENGTH
            and len(tenant) <= MAX_ID_LENGTH
            and id_fullmatch(task_id) is not None
            and id_fullmatch(tenant) is not None
            and type(priority) is Priority
            and type(payload) is dict
            and type(retries) is int
            and 0 <= retries <= MAX_RETRY_COUNT
            and type(max_retries) is int
            and 0 <= max_retries <= MAX_RETRY_COUNT
            and type(deps) is tuple
            and type(headers) is dict
            and type(name) is str
            and ((unique_key == "" and type(unique_key) is str) or is_valid_id(unique_key))
            and ((limit_key == "" and type(limit_key) is str) or is_valid_id(limit_key))
            and (type(window) is float or type(window) is int)
            and 0.0 <= window <= MAX_EPOCH_SECONDS
            and type(expires) is int
            and 0 <= expires <= MAX_EPOCH_SECONDS * 1000
            and (lease is None or type(lease) is Lease)
            and (not deps or all(is_valid_id(dep) for dep in deps))
            and (not headers or all(type(k) is str and type(v) is str for k, v in headers.items()))
        ):
            try:
                # created + max(0.0, delay), NaN included; a plain int or float as both are
                ready = created + (delay if delay > 0 else 0.0)
            except OverflowError:  # an int too large for a float: the validators say why
                ready = -1.0
            if 0.0 <= ready <= MAX_EPOCH_SECONDS:
                return unchecked_task(
                    task_id,
                    tenant,
                    priority,
                    payload,
                    retries,
                    max_retries,
                    created,
                    ready,
                    deps,
                    dict(headers) if headers else {},
                    name,
                    unique_key,
                    window,
                    expires / 1000 if expires else None,
                    lease,
                    None if message.keep_result else False,  # as ModelBuild.task
                    limit_key,
                )
        return super().task(message, payload, lease)


#: The one :class:`PrebuiltBuild` (it holds no state).
PREBUILT = PrebuiltBuild()


def model_build(accel: Accelerators) -> ModelBuild:
    """What a composition root plugs in: :data:`PREBUILT` when the switch is on, else the
    reference :class:`ModelBuild`."""
    return PREBUILT if accel.on(NAME) else REFERENCE_BUILD
