"""Groups, chords and chains: tasks wired by dependencies so that results flow (ADR 27).

Pure values (no I/O); ``queue.push_group``, ``push_chord`` and ``push_chain`` store all the
tasks of one in a single ``push_batch`` round trip, parents first.

* :func:`group`: tasks that run independently.
* :func:`chord`: a group and a callback that depends on every member, so it runs once, after
  all of them finished; its handler reads their results (``ctx.parent_results()``, and an
  ``@task`` callback gets them as its first argument, in member order).
* :func:`chain`: each task depends on the one before and gets its result (an ``@task`` step
  gets it as its first argument).

Failure policy (the dependency rule, ADR 9): a member or step that fails for good (or is
canceled) cancels the callback and every later step, with the reason ``dependency <id> did
not finish``; their handles raise TaskCanceledError. Retries of a member happen first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from fairque_core.domain.errors import TaskTypeError, TaskValidationError
from fairque_core.domain.models import Task

__all__ = [
    "INJECT_HEADER",
    "Chain",
    "Chord",
    "Group",
    "chain",
    "check_workflow",
    "chord",
    "group",
]

#: Header telling ``RegistryHandler`` to pass parent results as the first argument:
#: ``chain`` (the one parent's result) or ``chord:<n>`` (the list of the results of the
#: first ``n`` dependencies, the members; the callback's own dependencies come after them).
#: A bare ``chord`` (tasks pushed before 2026-11-27) passes every dependency's result.
INJECT_HEADER = "x-fairque-inject"


def _tasks(items: Iterable[Task], field: str) -> tuple[Task, ...]:
    if isinstance(items, (str, bytes, Task)):
        raise TaskTypeError(field, items, "must be a sequence of Task")
    try:
        out = tuple(items)
    except Exception as exc:  # not iterable, or its iteration failed: the cause is chained
        raise TaskTypeError(field, items, "must be a sequence of Task") from exc
    for item in out:
        if not isinstance(item, Task):
            raise TaskTypeError(field, item, "must hold only fairque_core.Task values")
    return out


def _one_tenant(tasks: Sequence[Task], field: str) -> None:
    """Chains and chords pass results, and a task reads results within its own tenant only
    (ADR 27): a step of another tenant would read its parent's result as None."""
    tenants = sorted({t.tenant for t in tasks})
    if len(tenants) > 1:
        raise TaskValidationError(
            field, tenants, "its tasks must belong to one tenant (results are read per tenant)"
        )


def check_workflow(value: object, kind: type[Group | Chord | Chain]) -> tuple[Task, ...]:
    """The tasks of ``value``, a ``kind`` as :func:`group`, :func:`chord` or :func:`chain`
    build it (``push_group``/``push_chord``/``push_chain`` check what they are given:
    TaskTypeError for another type, TaskValidationError for an empty one)."""
    field = kind.__name__.lower()
    if not isinstance(value, kind):
        raise TaskTypeError(field, value, f"must be a {kind.__name__} (build it with {field}())")
    tasks = value.tasks
    if kind is not Group:
        if not tasks:
            raise TaskValidationError(field, [], f"a {field} needs at least one task")
        _one_tenant(tasks, field)
    return tasks


def _group_tasks(items: object) -> tuple[Task, ...]:
    members = _tasks(items, "group")  # type: ignore[arg-type]  # checked there
    ids = [t.task_id for t in members]
    if len(set(ids)) != len(ids):
        raise TaskValidationError("group", ids, "task ids must differ")
    return members


def _as_group(members: object) -> Group:
    return members if isinstance(members, Group) else Group(members)


def _chain_tasks(items: object) -> tuple[Task, ...]:
    return _tasks(items, "chain")  # type: ignore[arg-type]  # checked there


@attrs.frozen
class Group:
    """Tasks pushed together, each running on its own (ids must differ). Built directly or
    with :func:`group`: the same checks, typed errors (TaskTypeError, TaskValidationError)."""

    tasks: tuple[Task, ...] = attrs.field(converter=_group_tasks)

    @property
    def task_ids(self) -> list[str]:
        return [t.task_id for t in self.tasks]


@attrs.frozen
class Chord:
    """A group and a callback that runs once after every member finished.

    Built directly or with :func:`chord`, the callback is wired to wait for the members
    (issue 34: a hand-built chord's callback ran at once); a callback wired already (a chord
    rebuilt from another's parts, ``attrs.evolve``) is kept as it is."""

    group: Group = attrs.field(converter=_as_group)
    callback: Task

    def __attrs_post_init__(self) -> None:
        members, callback = self.group.tasks, self.callback
        if not members:
            raise TaskValidationError("group", [], "a chord needs at least one member task")
        if not isinstance(callback, Task):
            raise TaskTypeError("callback", callback, "must be a fairque_core.Task")
        ids = self.group.task_ids
        if callback.task_id in ids:
            raise TaskValidationError("callback", callback.task_id, "is also a member of the group")
        _one_tenant((*members, callback), "chord")
        inject = f"chord:{len(members)}"
        if callback.headers.get(INJECT_HEADER) == inject and list(
            callback.depends_on[: len(ids)]
        ) == list(ids):
            return  # wired already
        wired = attrs.evolve(
            callback,
            depends_on=(*ids, *callback.depends_on),
            headers={**callback.headers, INJECT_HEADER: inject},
        )
        object.__setattr__(self, "callback", wired)

    @property
    def tasks(self) -> tuple[Task, ...]:
        return (*self.group.tasks, self.callback)


@attrs.frozen
class Chain:
    """Tasks run one after the other, each given the result of the one before.

    Built directly or with :func:`chain`, each step is wired to wait for the one before (a
    step wired already is kept as it is)."""

    tasks: tuple[Task, ...] = attrs.field(converter=_chain_tasks)

    def __attrs_post_init__(self) -> None:
        tasks = self.tasks
        if not tasks:
            raise TaskValidationError("chain", [], "a chain needs at least one task")
        if len({t.task_id for t in tasks}) != len(tasks):
            raise TaskValidationError("chain", [t.task_id for t in tasks], "task ids must differ")
        _one_tenant(tasks, "chain")
        out = [tasks[0]]
        for step in tasks[1:]:
            before = out[-1].task_id
            if step.headers.get(INJECT_HEADER) == "chain" and list(step.depends_on[:1]) == [before]:
                out.append(step)  # wired already
                continue
            out.append(
                attrs.evolve(
                    step,
                    depends_on=(before, *step.depends_on),
                    headers={**step.headers, INJECT_HEADER: "chain"},
                )
            )
        object.__setattr__(self, "tasks", tuple(out))


def group(tasks: Iterable[Task]) -> Group:
    """A group of ``tasks`` (ids must differ)."""
    return Group(tasks)


def chord(members: Group | Sequence[Task], callback: Task) -> Chord:
    """``callback`` after every task of ``members``; TaskValidationError (field ``group``)
    for an empty group: a callback with nothing to wait for is almost surely a mistake."""
    return Chord(members, callback)


def chain(*steps: Task) -> Chain:
    """``steps`` one after another, each depending on (and given the result of) the last."""
    return Chain(steps)
