"""The house rules of issue 29, checked on the source tree itself: no import circle between
modules, no module over 600 lines (generated ones and Lua included)."""

from __future__ import annotations

from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
PACKAGES = (
    "fairque_core",
    "fairque_redis",
    "fairque_plugins",
    "fairque_cli",
    "fairque_testing",
    "fairque_dashboard",
)
MAX_LINES = 600


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan's algorithm over
    the direct imports grimp reads, type-checking imports included)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & graph.modules) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for name in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(name)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.y", imported="a.z")
    assert import_cycles(graph) == [["a.x", "a.y"]]


def test_no_import_cycle_in_src() -> None:
    graph = grimp.build_graph(*PACKAGES)
    assert import_cycles(graph) == []


def test_no_module_over_600_lines() -> None:
    files = [*SRC.rglob("*.py"), *SRC.rglob("*.lua")]
    assert files
    too_long = {
        str(path.relative_to(SRC)): count
        for path in files
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert too_long == {}
