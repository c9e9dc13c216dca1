"""The dependency graph of a batch of tasks: edges, cycle detection, a push order.

An edge ``a -> b`` means "task ``a`` depends on task ``b``" (``b`` must finish first). Nodes
named only as a dependency (tasks pushed earlier) have no outgoing edges here. Everything is
pure and deterministic: the same edges in the same insertion order give the same answer.

The enqueue path calls :func:`check_batch` before any write, so a cyclic batch never reaches
a backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fairque_core.domain.errors import DependencyCycleError
from fairque_core.domain.models import Task

__all__ = ["check_batch", "dependency_edges", "find_cycle", "topological_order"]

Edges = Mapping[str, Iterable[str]]


def dependency_edges(tasks: Iterable[Task]) -> dict[str, tuple[str, ...]]:
    """``task_id -> depends_on`` for a batch, in batch order.

    A task id that appears twice keeps its first entry: pushing the second is a no-op.
    """
    edges: dict[str, tuple[str, ...]] = {}
    for task in tasks:
        edges.setdefault(task.task_id, tuple(task.depends_on))
    return edges


def _normalise(edges: Edges) -> dict[str, tuple[str, ...]]:
    """Every node (keys and the nodes they name) with its successors, insertion-ordered."""
    graph: dict[str, tuple[str, ...]] = {}
    for node, successors in edges.items():
        graph[node] = tuple(dict.fromkeys(successors))
    for successors in list(graph.values()):
        for successor in successors:
            graph.setdefault(successor, ())
    return graph


def _search(graph: Mapping[str, tuple[str, ...]]) -> tuple[list[str], tuple[str, ...] | None]:
    """Iterative depth-first search: (post-order, first cycle found or None).

    Post-order lists every node after all the nodes it reaches, which is the order
    "dependencies before dependents". The search stops at the first back edge.
    """
    done: set[str] = set()
    order: list[str] = []
    for root in graph:
        if root in done:
            continue
        path: list[str] = [root]
        on_path: dict[str, int] = {root: 0}
        cursors: list[int] = [0]
        while path:
            node = path[-1]
            successors = graph[node]
            index = cursors[-1]
            if index == len(successors):
                path.pop()
                cursors.pop()
                del on_path[node]
                done.add(node)
                order.append(node)
                continue
            cursors[-1] = index + 1
            successor = successors[index]
            if successor in on_path:
                cycle = (*path[on_path[successor] :], successor)
                return order, cycle
            if successor in done:
                continue
            on_path[successor] = len(path)
            path.append(successor)
            cursors.append(0)
    return order, None


def find_cycle(edges: Edges) -> tuple[str, ...] | None:
    """A dependency cycle in ``edges``, first node repeated at the end, or None.

    ``("a", "b", "a")`` means a depends on b and b on a; a self-loop is ``("a", "a")``.
    """
    return _search(_normalise(edges))[1]


def topological_order(edges: Edges) -> list[str]:
    """Every node of ``edges``, each after all the nodes it depends on.

    Raises :class:`~fairque_core.domain.errors.DependencyCycleError` when there is a cycle.
    """
    order, cycle = _search(_normalise(edges))
    if cycle is not None:
        raise DependencyCycleError(cycle)
    return order


def check_batch(tasks: Iterable[Task]) -> None:
    """Raise DependencyCycleError when the tasks of one batch depend on each other in a cycle."""
    cycle = find_cycle(dependency_edges(tasks))
    if cycle is not None:
        raise DependencyCycleError(cycle)
