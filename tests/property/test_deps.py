"""Properties of dependency-cycle detection and the push order, against brute force."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairque_core import DependencyCycleError, Task
from fairque_core.domain.deps import check_batch, dependency_edges, find_cycle, topological_order

NODES = [f"t{i}" for i in range(8)]

graphs = st.dictionaries(
    st.sampled_from(NODES), st.lists(st.sampled_from(NODES), max_size=4), max_size=len(NODES)
)
# Graphs whose edges only point "down" (t5 -> t2) can never have a cycle.
dags = graphs.map(
    lambda g: {a: [b for b in deps if NODES.index(b) < NODES.index(a)] for a, deps in g.items()}
)


def _closure(edges: dict[str, list[str]]) -> dict[str, set[str]]:
    """Brute force: for each node, every node reachable by one or more edges."""
    nodes = set(edges) | {b for deps in edges.values() for b in deps}
    reach = {n: set(edges.get(n, ())) for n in nodes}
    changed = True
    while changed:
        changed = False
        for n in nodes:
            extra = set().union(*(reach[m] for m in reach[n])) - reach[n]
            if extra:
                reach[n] |= extra
                changed = True
    return reach


def _is_real_cycle(cycle: tuple[str, ...], edges: dict[str, list[str]]) -> bool:
    if len(cycle) < 2 or cycle[0] != cycle[-1]:
        return False
    if len(set(cycle[:-1])) != len(cycle) - 1:  # a simple cycle: no node twice
        return False
    return all(b in edges.get(a, ()) for a, b in itertools.pairwise(cycle))


@given(graphs)
def test_find_cycle_agrees_with_reachability(edges: dict[str, list[str]]) -> None:
    reach = _closure(edges)
    has_cycle = any(node in reach[node] for node in reach)
    cycle = find_cycle(edges)
    assert (cycle is not None) == has_cycle
    if cycle is not None:
        assert _is_real_cycle(cycle, edges), cycle


@given(dags)
def test_dags_have_no_cycle(edges: dict[str, list[str]]) -> None:
    assert find_cycle(edges) is None


@given(graphs)
def test_topological_order_respects_every_edge(edges: dict[str, list[str]]) -> None:
    nodes = set(edges) | {b for deps in edges.values() for b in deps}
    cycle = find_cycle(edges)
    if cycle is not None:
        with pytest.raises(DependencyCycleError) as info:
            topological_order(edges)
        assert _is_real_cycle(info.value.cycle, edges)
        return
    order = topological_order(edges)
    assert sorted(order) == sorted(nodes)  # every node exactly once
    position = {node: i for i, node in enumerate(order)}
    for node, deps in edges.items():
        for dep in deps:
            assert position[dep] < position[node], (dep, node)


@given(graphs)
def test_deterministic(edges: dict[str, list[str]]) -> None:
    assert find_cycle(edges) == find_cycle(dict(edges))
    if find_cycle(edges) is None:
        assert topological_order(edges) == topological_order(dict(edges))


def _tasks(edges: dict[str, list[str]]) -> list[Task]:
    return [Task(task_id=node, tenant="u", depends_on=tuple(deps)) for node, deps in edges.items()]


@given(graphs)
def test_check_batch_raises_exactly_for_cyclic_batches(edges: dict[str, list[str]]) -> None:
    tasks = _tasks(edges)
    assert dependency_edges(tasks) == {node: tuple(deps) for node, deps in edges.items()}
    if find_cycle(edges) is None:
        check_batch(tasks)
    else:
        with pytest.raises(DependencyCycleError) as info:
            check_batch(tasks)
        assert _is_real_cycle(info.value.cycle, edges)
        assert " -> ".join(info.value.cycle) in str(info.value)


def test_examples() -> None:
    assert find_cycle({"a": ["a"]}) == ("a", "a")
    assert find_cycle({"a": ["b"], "b": ["a"]}) == ("a", "b", "a")
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ("a", "b", "c", "a")
    assert find_cycle({"a": ["b"], "b": []}) is None
    assert find_cycle({}) is None
    assert topological_order({"a": ["b", "c"], "b": ["c"]}) == ["c", "b", "a"]
    assert topological_order({"x": ["old-task"]}) == ["old-task", "x"]


def test_duplicate_task_id_keeps_its_first_entry() -> None:
    first = Task(task_id="a", tenant="u", depends_on=("b",))
    again = Task(task_id="a", tenant="u", depends_on=())
    assert dependency_edges([first, again]) == {"a": ("b",)}


def test_long_chain_does_not_hit_the_recursion_limit() -> None:
    n = 5000
    edges = {f"n{i}": [f"n{i + 1}"] for i in range(n)}
    order = topological_order(edges)
    assert order[0] == f"n{n}"
    assert order[-1] == "n0"
    edges[f"n{n}"] = ["n0"]
    cycle = find_cycle(edges)
    assert cycle is not None
    assert len(cycle) == n + 2
