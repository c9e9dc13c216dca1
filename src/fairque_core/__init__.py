"""fairque core: the pure domain of a multi-tenant fair task queue (no I/O, no redis)."""

from fairque_core._types import FailureType, Priority, TaskState
from fairque_core.config import FairQueueConfig, QueueConfig, RedisConfig, TierConfig, WorkerConfig
from fairque_core.deps import check_batch, dependency_edges, find_cycle, topological_order
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
from fairque_core.handlers import RegistryHandler, TaskHandler, TaskRegistry, task
from fairque_core.memory import InMemoryBackend
from fairque_core.memory_async import AsyncInMemoryBackend
from fairque_core.models import Claimed, DLQEntry, Lease, Message, QueueSizes, Task
from fairque_core.ports import AsyncQueueBackend, Clock, QueueBackend, TokenSource
from fairque_core.retry import RetryDecision, RetryPolicy, decide
from fairque_core.states import TERMINAL_STATES, TRANSITIONS, TaskEvent, next_state
from fairque_core.worker import Worker
from fairque_core.worker_async import AsyncWorker

__all__ = [
    "TERMINAL_STATES",
    "TRANSITIONS",
    "AsyncFairQueue",
    "AsyncInMemoryBackend",
    "AsyncQueueBackend",
    "AsyncWorker",
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
    "RegistryHandler",
    "RetryDecision",
    "RetryPolicy",
    "ScriptContractError",
    "Task",
    "TaskEvent",
    "TaskHandler",
    "TaskNotFoundError",
    "TaskRegistry",
    "TaskSerializationError",
    "TaskState",
    "TaskTimeoutError",
    "TaskValidationError",
    "TierConfig",
    "TokenSource",
    "UnknownTaskError",
    "Worker",
    "WorkerConfig",
    "check_batch",
    "decide",
    "dependency_edges",
    "find_cycle",
    "next_state",
    "task",
    "topological_order",
]
