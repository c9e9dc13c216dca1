"""The default plugins: plain Python, registered explicitly by the PluginHost.

* :class:`JsonPayloadCodec` - strict JSON (UTF-8, no NaN/Infinity, str keys, dict at the top),
  content type ``application/json``. It is ``trylast``: any other codec plugin wins.
* :class:`DefaultRetry` - exponential backoff (a :class:`~fairque_core.domain.retry.RetrySchedule`
  built from the queue config by :func:`retry_schedule`) until the task's ``max_retries`` is
  used up, then the dead-letter queue as ``failed``.
* :class:`DefaultExecutor` - runs the task's ``call()``; other plugins wrap it.

The strict JSON rules themselves (``encode_json``, ``decode_json``) are
:mod:`fairque_core.ports.json_codec`, shared with the ``fairque_plugins`` codec.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fairque_core.ports.hooks import hookimpl
from fairque_core.ports.json_codec import (
    JSON_CONTENT_TYPE,
    check_str_keys,
    decode_json,
    encode_json,
    media_type,
)

if TYPE_CHECKING:
    from fairque_core.domain.models import Task
    from fairque_core.domain.retry import RetryDecision, RetrySchedule
    from fairque_core.settings.config import QueueConfig

__all__ = [
    "DEFAULT_PLUGINS",
    "JSON_CONTENT_TYPE",
    "DefaultExecutor",
    "DefaultRetry",
    "JsonPayloadCodec",
    "check_str_keys",
    "decode_json",
    "encode_json",
    "media_type",
    "retry_schedule",
]


class JsonPayloadCodec:
    """The fallback codec: strict JSON, used when no other codec plugin encodes."""

    fairque_plugin_name = "fairque.defaults.json"

    @hookimpl(trylast=True)
    def fairque_payload_encode(self, task: Task) -> tuple[bytes, str]:
        return encode_json(task.payload), JSON_CONTENT_TYPE

    @hookimpl(trylast=True)
    def fairque_payload_decode(self, content_type: str, body: bytes) -> dict[str, Any] | None:
        if media_type(content_type) != JSON_CONTENT_TYPE:
            return None
        return decode_json(body)


def retry_schedule(config: QueueConfig) -> RetrySchedule:
    """The backoff of a queue's ``retry_*`` settings (the domain never reads the config)."""
    from fairque_core.domain.retry import RetrySchedule

    return RetrySchedule(
        base=config.retry_base_seconds,
        factor=config.retry_factor,
        cap=config.retry_cap_seconds,
        jitter=config.retry_jitter,
    )


def retry_decision(
    task: Task, error: BaseException, attempt: int, policy: RetrySchedule | None = None
) -> RetryDecision:
    """Backoff by ``policy`` while ``attempt <= task.max_retries``, else dead as FAILED.

    ``attempt`` is 1 for the first failure, so the first retry waits ``policy.delay(0)``.
    """
    from fairque_core.domain.retry import RetrySchedule, decide

    chosen = policy if policy is not None else RetrySchedule()
    return decide(chosen, max(0, attempt - 1), task.max_retries, error)


class DefaultRetry:
    """The fallback retry policy (``trylast``): backoff, then the DLQ as ``failed``.

    The backoff comes from the queue config's ``retry_*`` settings once ``fairque_configure``
    delivers a ``QueueConfig`` (see :func:`retry_schedule`); until then from
    ``RetrySchedule()``'s defaults.
    """

    fairque_plugin_name = "fairque.defaults.retry"

    def __init__(self, policy: RetrySchedule | None = None) -> None:
        self.policy = policy

    @hookimpl
    def fairque_configure(self, config: object) -> None:
        from fairque_core.settings.config import QueueConfig

        if isinstance(config, QueueConfig):
            self.policy = retry_schedule(config)

    @hookimpl(trylast=True)
    def fairque_retry_decide(self, task: Task, error: BaseException, attempt: int) -> RetryDecision:
        return retry_decision(task, error, attempt, self.policy)


class DefaultExecutor:
    """Runs the task (``trylast``); wrapper plugins go around it."""

    fairque_plugin_name = "fairque.defaults.executor"

    @hookimpl(trylast=True)
    def fairque_task_execute(self, call: Callable[[], object]) -> object:
        return call()


#: The default plugin classes; every host registers a fresh instance of each first (so with
#: the lowest precedence).
DEFAULT_PLUGINS: tuple[type, ...] = (JsonPayloadCodec, DefaultRetry, DefaultExecutor)
