"""fairque core: the pure domain of a multi-tenant fair task queue (no I/O, no redis)."""

from fairque_core._types import FailureType, Priority, TaskState
from fairque_core.config import FairQueueConfig, QueueConfig, RedisConfig, TierConfig, WorkerConfig
from fairque_core.engine import FairQueue
from fairque_core.engine_async import AsyncFairQueue
from fairque_core.errors import (
    BackendError,
    BackendOutOfMemoryError,
    ConfigurationError,
    DependencyCycleError,
    DomainError,
    FairQueueError,
    InvalidTransition,
    LeaseLostError,
    LuaScriptError,
    OutcomeUnknownError,
    PayloadTooLargeError,
    PluginError,
    RedisConnectionError,
    ScriptContractError,
    TaskNotFoundError,
    TaskSerializationError,
    TaskTimeoutError,
    TaskValidationError,
    UnknownTaskError,
)
from fairque_core.memory import InMemoryBackend
from fairque_core.memory_async import AsyncInMemoryBackend
from fairque_core.models import Claimed, DLQEntry, Lease, Message, QueueSizes, Task
from fairque_core.ports import AsyncQueueBackend, Clock, QueueBackend, TokenSource

__all__ = [
    "AsyncFairQueue",
    "AsyncInMemoryBackend",
    "AsyncQueueBackend",
    "BackendError",
    "BackendOutOfMemoryError",
    "Claimed",
    "Clock",
    "ConfigurationError",
    "DLQEntry",
    "DependencyCycleError",
    "DomainError",
    "FailureType",
    "FairQueue",
    "FairQueueConfig",
    "FairQueueError",
    "InMemoryBackend",
    "InvalidTransition",
    "Lease",
    "LeaseLostError",
    "LuaScriptError",
    "Message",
    "OutcomeUnknownError",
    "PayloadTooLargeError",
    "PluginError",
    "Priority",
    "QueueBackend",
    "QueueConfig",
    "QueueSizes",
    "RedisConfig",
    "RedisConnectionError",
    "ScriptContractError",
    "Task",
    "TaskNotFoundError",
    "TaskSerializationError",
    "TaskState",
    "TaskTimeoutError",
    "TaskValidationError",
    "TierConfig",
    "TokenSource",
    "UnknownTaskError",
    "WorkerConfig",
]
