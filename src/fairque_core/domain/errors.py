"""The one error tree of fairque.

Every exception fairque raises on purpose derives from :class:`FairQueueError`. Where a stdlib
category fits, the error also derives from it (``TaskValidationError`` is a ``ValueError``,
``TaskNotFoundError`` a ``KeyError``), so callers can catch either. Errors carry their data as
attributes, not only in the message.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "BackendError",
    "BackendOutOfMemoryError",
    "BackendPermissionError",
    "ConfigurationError",
    "DLQEntryNotFoundError",
    "DamagedKeyError",
    "DependencyCycleError",
    "DomainError",
    "FairQueueError",
    "InvalidTransition",
    "LeaseLostError",
    "LuaScriptError",
    "NotReplicatedError",
    "OutcomeUnknownError",
    "PayloadTooLargeError",
    "PluginError",
    "RedisConnectionError",
    "ResultTimeoutError",
    "ScheduleValidationError",
    "ScriptContractError",
    "TaskCanceledError",
    "TaskFailedError",
    "TaskIdConflictError",
    "TaskNotFoundError",
    "TaskSerializationError",
    "TaskTimeoutError",
    "TaskTypeError",
    "TaskValidationError",
    "UnknownTaskError",
    "UnsafeServerConfigError",
    "XComTooLargeError",
]


class FairQueueError(Exception):
    """Root of every error fairque raises on purpose."""


class DomainError(FairQueueError):
    """A rule of the domain was broken (raised by the pure core, no I/O involved)."""


class TaskValidationError(DomainError, ValueError):
    """A task, tenant id, task id or queue name breaks a rule.

    ``field`` names what was checked, ``value`` is the offending value and ``rule`` says which
    rule it broke. Raised before any command reaches a server.
    """

    def __init__(self, field: str, value: object, rule: str) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"invalid {field} {shown}: {rule}")


class TaskIdConflictError(FairQueueError, ValueError):
    """A push named a task id that a live task of *another* tenant holds (ADR 60).

    A task id belongs to its tenant while the task lives: another tenant's push of the same id
    is neither stored nor reported as a duplicate of that task (its handle would read the other
    tenant's result). ``push`` and ``push_batch`` refuse the whole call with this error and
    store nothing; a handle of a task sent through the intake raises it from ``get`` (the
    entry was set aside when the queue took it in). ``task_id`` is the id; the error does not
    say which tenant holds it.
    """

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(
            f"task id {task_id!r} is held by a live task of another tenant: nothing was "
            "stored under it for this tenant (a task id is unique in a queue while its task "
            "lives; use ids scoped by tenant, or the default random ones)"
        )


class TaskTypeError(TaskValidationError, TypeError):
    """A value of the wrong type (a non-str name, a foreign object for a Task ...): a
    TaskValidationError that is also a ``TypeError``, as Python's own type errors are."""


class PayloadTooLargeError(TaskValidationError):
    """An encoded payload is larger than the queue's ``max_payload_bytes``."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__("payload", f"<{size} bytes>", f"larger than the limit of {limit} bytes")


class ScheduleValidationError(TaskValidationError):
    """A cron schedule breaks a rule: ``field`` is ``cron``, ``timezone``, ``misfire``,
    ``jitter``, ``name`` or a task template field (``tenant``, ``priority``, ``payload`` ...)."""


class XComTooLargeError(TaskValidationError):
    """An XCom value encodes to more bytes than the cap; ``field`` is ``xcom[<key>]``."""

    def __init__(self, key: str, size: int, limit: int) -> None:
        self.key = key
        self.size = size
        self.limit = limit
        super().__init__(
            f"xcom[{key}]", f"<{size} bytes>", f"larger than the limit of {limit} bytes"
        )


class InvalidTransition(DomainError):
    """A task event is not allowed in the task's current state."""

    def __init__(self, state: object, event: object) -> None:
        self.state = state
        self.event = event
        super().__init__(f"event {event!s} is not allowed in state {state!s}")


class DependencyCycleError(DomainError, ValueError):
    """Task dependencies form a cycle; ``cycle`` lists it, first node repeated at the end."""

    def __init__(self, cycle: Sequence[str]) -> None:
        self.cycle = tuple(cycle)
        super().__init__("dependency cycle: " + " -> ".join(self.cycle))


class TaskSerializationError(FairQueueError, ValueError):
    """A payload could not be encoded or decoded."""


class TaskTimeoutError(FairQueueError, TimeoutError):
    """A task ran longer than its worker's ``task_timeout_seconds``."""

    def __init__(self, task_id: str, timeout: float) -> None:
        self.task_id = task_id
        self.timeout = timeout
        super().__init__(f"task {task_id} timed out after {timeout:g} s")


class TaskFailedError(FairQueueError):
    """A task failed for good (it is in the DLQ): what its handler raised, as stored.

    ``error_type`` is the exception's class name (``""`` when the task failed without one: an
    expired lease, a poisoned payload), ``error_message`` its text, ``traceback`` a summary of
    where it was raised; ``failure_type`` and ``reason`` are the DLQ's. Raised by
    ``TaskHandle.get`` for a task that failed.
    """

    def __init__(
        self,
        task_id: str,
        *,
        error_type: str = "",
        error_message: str = "",
        traceback: str = "",
        failure_type: str = "failed",
        reason: str = "",
    ) -> None:
        self.task_id = task_id
        self.error_type = error_type
        self.error_message = error_message
        self.traceback = traceback
        self.failure_type = failure_type
        self.reason = reason
        what = f"{error_type}: {error_message}" if error_type else (reason or failure_type)
        super().__init__(f"task {task_id} failed ({failure_type}): {what}")


class TaskCanceledError(FairQueueError):
    """The task was canceled (by ``cancel``, a purge, or a dependency that did not finish);
    ``reason`` says which. Raised by ``TaskHandle.get``."""

    def __init__(self, task_id: str, reason: str = "") -> None:
        self.task_id = task_id
        self.reason = reason
        super().__init__(f"task {task_id} was canceled" + (f": {reason}" if reason else ""))


class ResultTimeoutError(FairQueueError, TimeoutError):
    """``TaskHandle.get`` waited ``timeout`` seconds and the task has no outcome yet (it is
    still queued, scheduled, waiting or running). Not the same as a result that is None."""

    def __init__(self, task_id: str, timeout: float) -> None:
        self.task_id = task_id
        self.timeout = timeout
        super().__init__(f"task {task_id} has no result after {timeout:g} s")


class UnknownTaskError(FairQueueError, LookupError):
    """A worker was handed a task whose name no handler registered."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no handler is registered for task name {name!r}")


class TaskNotFoundError(FairQueueError, KeyError):
    """No task with this id exists (it was never pushed, or it expired)."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(task_id)

    def __str__(self) -> str:
        return f"no task with id {self.task_id!r}"


class DLQEntryNotFoundError(FairQueueError, LookupError):
    """``requeue_dlq``/``purge_dlq`` named ids that are not in the dead-letter queue
    (``entry_ids``, in the order given); nothing was requeued or purged."""

    def __init__(self, entry_ids: list[str]) -> None:
        self.entry_ids = entry_ids
        shown = ", ".join(entry_ids[:5]) + (" ..." if len(entry_ids) > 5 else "")
        super().__init__(f"not in the dead-letter queue: {shown} (nothing was changed)")


class ConfigurationError(FairQueueError, ValueError):
    """A configuration value is invalid; ``path`` names the field, ``value`` the bad value."""

    def __init__(self, message: str, *, path: str = "", value: object = None) -> None:
        self.path = path
        self.value = value
        super().__init__(message)


class PluginError(FairQueueError):
    """A plugin raised or misbehaved; ``plugin`` names it."""

    def __init__(self, plugin: str, hook: str, error: BaseException) -> None:
        self.plugin = plugin
        self.hook = hook
        self.error = error
        super().__init__(f"plugin {plugin!r} failed in {hook}: {error!r}")


class ParentResultExpiredError(FairQueueError):
    """A chain step or chord callback started after a parent's finished record expired
    (``result_ttl_seconds`` after the parent finished), so the parent's result is gone.

    The task goes to the DLQ as ``poisoned`` (a retry cannot bring the result back); keep
    ``result_ttl_seconds`` above the longest a workflow's step may wait in the queue.
    """

    def __init__(self, task_id: str, parents: list[str]) -> None:
        self.task_id = task_id
        self.parents = parents
        shown = ", ".join(parents[:5]) + (" ..." if len(parents) > 5 else "")
        super().__init__(
            f"task {task_id}: the result of {shown} expired before it started "
            "(result_ttl_seconds is shorter than the wait in the queue)"
        )


class QueueClosedError(FairQueueError, RuntimeError):
    """A call on a queue after its ``close()``: the queue does not reopen its connections.

    Build a new queue (``FairQueue.from_config``/``from_url``) to go on.
    """

    def __init__(self, queue: str) -> None:
        self.queue = queue
        super().__init__(f"queue {queue!r} is closed")


class BackendError(FairQueueError):
    """A queue backend (Redis, Valkey, ...) could not do what was asked."""


class RedisConnectionError(BackendError, ConnectionError):
    """The server could not be reached, or the connection broke."""


class OutcomeUnknownError(RedisConnectionError):
    """The connection broke after a write was sent: it may or may not have been applied.

    fairque never retries a write blindly; a push can be retried safely with the same task id
    (push is idempotent by id), a claim's orphan lease is recovered by the reaper.
    """


class NotReplicatedError(OutcomeUnknownError):
    """The write WAS applied on the primary, but no replica confirmed it in time
    (``durability="replicated"``, ADR 33): if the primary fails over now, the promoted replica
    may not have it, so whether the write lasts is unknown.

    ``operation`` is the call (``push``, ``finish`` ...), ``command`` the wait that ran out
    (``WAIT`` or ``WAITAOF``), ``timeout_ms`` its budget, ``received`` whether a replica had at
    least received the write (WAIT answered, WAITAOF did not), and ``result`` what the backend
    call returned on the primary (``push``/``push_batch``: one "created" flag per task;
    ``cancel``: whether it canceled). A push can be retried with the same task id, as after any
    OutcomeUnknownError; the retry waits again.
    """

    def __init__(
        self,
        operation: str,
        *,
        command: str,
        timeout_ms: int,
        received: bool = False,
        result: object = None,
    ) -> None:
        self.operation = operation
        self.command = command
        self.timeout_ms = timeout_ms
        self.received = received
        self.result = result
        if received:
            missing = (
                "a replica received it but did not confirm writing it to its append-only file "
                "(WAITAOF needs appendonly yes on the replica)"
            )
        else:
            missing = "no replica acknowledged it"
        super().__init__(
            f"{operation} was applied on the primary but is not confirmed on a replica: "
            f"{missing} within {timeout_ms} ms ({command}); it may be lost if the primary "
            "fails over before the replica catches up"
        )


class BackendOutOfMemoryError(BackendError):
    """The server refused a write because it reached ``maxmemory``."""


class BackendPermissionError(BackendError, PermissionError):
    """The server refused a command to the connection's user (an ACL ``NOPERM`` reply).

    ``command`` names the refused command when the server said which (Redis 7 does not for a
    command inside a script: then it is ``None``); ``operation`` is the fairque operation
    (``push``, ``claim``, ``ping`` ...) that sent it. Nothing was changed.
    """

    def __init__(self, operation: str, command: str | None, detail: str = "") -> None:
        self.operation = operation
        self.command = command
        what = f"the {command!r} command" if command else "a command it needs"
        text = f"the server's ACL does not let this user run {what} ({operation})"
        if detail:
            text += f": {detail}"
        super().__init__(text)


class UnsafeServerConfigError(BackendError):
    """The server runs with a setting under which fairque would lose tasks silently.

    ``setting`` is the server setting (``maxmemory-policy``), ``value`` its value there and
    ``required`` the value fairque needs; ``opt_out`` names the option that accepts the risk.
    """

    def __init__(self, setting: str, value: str, required: str, *, why: str, opt_out: str) -> None:
        self.setting = setting
        self.value = value
        self.required = required
        self.opt_out = opt_out
        super().__init__(
            f"the server's {setting} is {value!r}: {why}. Set `{setting} {required}` on the "
            f"server (CONFIG SET {setting} {required}, and in its config file), or pass "
            f"{opt_out} to accept the loss"
        )


class DamagedKeyError(BackendError):
    """A key of the queue holds another Redis type than fairque writes there (damaged behind
    the client's back, e.g. an operator's ``SET`` on it).

    ``key`` is the key, ``found`` its type, ``expected`` the type it must have. The call was
    refused before it wrote anything; ``fairque doctor --repair`` deletes such a key and
    rebuilds what it held from the task records. ``advice``, when given, replaces that hint
    in the message, for a key the doctor cannot rebuild (a queue's ``partitions`` record).
    ``partial`` True: the key was met after the call's first write (a key no up-front check
    covers, see docs/operations.md), so part of the call may stand; the doctor finds and
    repairs what it left.
    """

    def __init__(
        self, key: str, found: str, expected: str, *, advice: str = "", partial: bool = False
    ) -> None:
        self.key = key
        self.found = found
        self.expected = expected
        self.partial = partial
        fix = advice or "run `fairque doctor --repair` on the queue"
        outcome = "the call may have applied in part" if partial else "the call changed nothing"
        super().__init__(
            f"key {key!r} is a {found}, fairque keeps a {expected} there: {outcome}; {fix}"
        )


class LeaseLostError(BackendError):
    """The caller's lease on a task is gone (expired and reclaimed, or the token is stale).

    Nothing was changed.
    """

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"the lease on task {task_id} is lost (expired or held by another worker)")


class LuaScriptError(BackendError):
    """A server-side script failed in a way that has no more specific error."""

    def __init__(self, script_name: str, error_details: object) -> None:
        self.script_name = script_name
        self.error_details = error_details
        super().__init__(f"Lua script '{script_name}' failed: {error_details}")


class ScriptContractError(LuaScriptError):
    """A script replied with something its contract does not allow."""
