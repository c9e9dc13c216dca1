"""fairque core: the public facade over the pure domain, the ports and settings, the engine,
workers and scheduler, and the in-memory reference backend (no redis)."""

from fairque_core.app.context import TaskContext, current_task_context
from fairque_core.app.engine.batcher import PendingPush, PushBatcher
from fairque_core.app.engine.batcher_async import AsyncPendingPush, AsyncPushBatcher
from fairque_core.app.engine.batching import BatcherClosedError, BatchPushError
from fairque_core.app.engine.handles import TaskHandle
from fairque_core.app.engine.handles_async import AsyncTaskHandle
from fairque_core.app.engine.queue import FairQueue
from fairque_core.app.engine.queue_async import AsyncFairQueue
from fairque_core.app.engine.workflows import Chain, Chord, Group, chain, chord, group
from fairque_core.app.scheduler.scheduler import Scheduler
from fairque_core.app.scheduler.scheduler_async import AsyncScheduler
from fairque_core.app.worker.handlers import RegistryHandler, TaskHandler, TaskRegistry, task
from fairque_core.app.worker.worker import Worker
from fairque_core.app.worker.worker_async import AsyncWorker
from fairque_core.domain.deps import check_batch, dependency_edges, find_cycle, topological_order
from fairque_core.domain.enums import FailureType, Priority, TaskState
from fairque_core.domain.errors import (
    BackendError,
    BackendOutOfMemoryError,
    BackendPermissionError,
    ConfigurationError,
    DamagedKeyError,
    DependencyCycleError,
    DLQEntryNotFoundError,
    DomainError,
    FairQueueError,
    InvalidTransition,
    LeaseLostError,
    LuaScriptError,
    NotReplicatedError,
    OutcomeUnknownError,
    ParentResultExpiredError,
    PayloadTooLargeError,
    PluginError,
    QueueClosedError,
    RedisConnectionError,
    ResultTimeoutError,
    ScheduleValidationError,
    ScriptContractError,
    TaskCanceledError,
    TaskFailedError,
    TaskIdConflictError,
    TaskNotFoundError,
    TaskSerializationError,
    TaskTimeoutError,
    TaskTypeError,
    TaskValidationError,
    UnknownTaskError,
    UnsafeServerConfigError,
    XComTooLargeError,
)
from fairque_core.domain.events import EventType, QueueEvent
from fairque_core.domain.intake import INTAKE_CLAIM_LIMIT, IngestReport
from fairque_core.domain.key_limits import KeyLimits, KeyLimitStatus
from fairque_core.domain.limits import Limits, LimitStatus, TenantQueueFullError
from fairque_core.domain.models import Claimed, DLQEntry, Lease, Message, QueueSizes, Task
from fairque_core.domain.outcomes import TaskOutcome
from fairque_core.domain.retry import RetryDecision, RetrySchedule, decide
from fairque_core.domain.schedules import Misfire, Schedule, ScheduleInfo, TaskTemplate
from fairque_core.domain.states import TERMINAL_STATES, TRANSITIONS, TaskEvent, next_state
from fairque_core.domain.task_records import TaskAttempt, TaskPage, TaskRecord, TaskSummary
from fairque_core.domain.tenant_figures import TenantFairness
from fairque_core.memory.async_model import AsyncInMemoryBackend
from fairque_core.memory.model import InMemoryBackend
from fairque_core.ports import AsyncQueueBackend, Clock, QueueBackend, TokenSource
from fairque_core.ports.hooks import hookimpl
from fairque_core.settings.config import (
    FairQueueConfig,
    QueueConfig,
    RedisConfig,
    TierConfig,
    WorkerConfig,
)

__all__ = [
    "INTAKE_CLAIM_LIMIT",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "AsyncFairQueue",
    "AsyncInMemoryBackend",
    "AsyncPendingPush",
    "AsyncPushBatcher",
    "AsyncQueueBackend",
    "AsyncScheduler",
    "AsyncTaskHandle",
    "AsyncWorker",
    "BackendError",
    "BackendOutOfMemoryError",
    "BackendPermissionError",
    "BatchPushError",
    "BatcherClosedError",
    "Chain",
    "Chord",
    "Claimed",
    "Clock",
    "ConfigurationError",
    "DLQEntry",
    "DLQEntryNotFoundError",
    "DamagedKeyError",
    "DependencyCycleError",
    "DomainError",
    "EventType",
    "FailureType",
    "FairQueue",
    "FairQueueConfig",
    "FairQueueError",
    "Group",
    "InMemoryBackend",
    "IngestReport",
    "InvalidTransition",
    "KeyLimitStatus",
    "KeyLimits",
    "Lease",
    "LeaseLostError",
    "LimitStatus",
    "Limits",
    "LuaScriptError",
    "Message",
    "Misfire",
    "NotReplicatedError",
    "OutcomeUnknownError",
    "ParentResultExpiredError",
    "PayloadTooLargeError",
    "PendingPush",
    "PluginError",
    "Priority",
    "PushBatcher",
    "QueueBackend",
    "QueueClosedError",
    "QueueConfig",
    "QueueEvent",
    "QueueSizes",
    "RedisConfig",
    "RedisConnectionError",
    "RegistryHandler",
    "ResultTimeoutError",
    "RetryDecision",
    "RetrySchedule",
    "Schedule",
    "ScheduleInfo",
    "ScheduleValidationError",
    "Scheduler",
    "ScriptContractError",
    "Task",
    "TaskAttempt",
    "TaskCanceledError",
    "TaskContext",
    "TaskEvent",
    "TaskFailedError",
    "TaskHandle",
    "TaskHandler",
    "TaskIdConflictError",
    "TaskNotFoundError",
    "TaskOutcome",
    "TaskPage",
    "TaskRecord",
    "TaskRegistry",
    "TaskSerializationError",
    "TaskState",
    "TaskSummary",
    "TaskTemplate",
    "TaskTimeoutError",
    "TaskTypeError",
    "TaskValidationError",
    "TenantFairness",
    "TenantQueueFullError",
    "TierConfig",
    "TokenSource",
    "UnknownTaskError",
    "UnsafeServerConfigError",
    "Worker",
    "WorkerConfig",
    "XComTooLargeError",
    "chain",
    "check_batch",
    "chord",
    "current_task_context",
    "decide",
    "dependency_edges",
    "find_cycle",
    "group",
    "hookimpl",
    "next_state",
    "task",
    "topological_order",
]
