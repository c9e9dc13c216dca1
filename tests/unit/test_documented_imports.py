"""Every fairque import the README and docs/*.md show really works.

Each ``from fairque_... import ...`` and ``import fairque_...`` statement in a fenced code block
(parenthesised continuation lines included) or in inline code of the prose is imported here, so
a module path or a name the docs promise cannot vanish or move without this test failing
(``fairque_core.hookspecs`` and ``fairque_core.retry`` once did, issue 29).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# every page of the docs site, in subfolders too (docs/reference/); not the ADRs, records of
# their day whose quoted imports may since be gone
DOCS = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").rglob("*.md") if "adr" not in p.relative_to(ROOT).parts),
]

_FENCE = re.compile(r"^\s*(```|~~~)")
_STATEMENT = re.compile(r"^\s*(?:>>>\s*|\.\.\.\s*)?((?:from|import)\s+fairque_\w*\b.*)$")
_INLINE = re.compile(r"`((?:from|import) fairque_\w*[^`]*)`")


def _fenced_statements(lines: list[str]) -> list[tuple[int, str]]:
    """(line number, statement) of each fairque import inside a fenced block."""
    out: list[tuple[int, str]] = []
    inside = False
    pending: tuple[int, list[str]] | None = None
    for number, line in enumerate(lines, 1):
        if _FENCE.match(line):
            inside = not inside
            pending = None
            continue
        if not inside:
            continue
        if pending is not None:
            pending[1].append(line.split("#", 1)[0])
            if ")" in line:
                out.append((pending[0], " ".join(pending[1])))
                pending = None
            continue
        found = _STATEMENT.match(line)
        if found is None:
            continue
        statement = found.group(1).split("#", 1)[0].rstrip()
        if statement.endswith("(") or ("(" in statement and ")" not in statement):
            pending = (number, [statement])
        else:
            out.append((number, statement))
    return out


def _inline_statements(lines: list[str]) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    inside = False
    for number, line in enumerate(lines, 1):
        if _FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            out.extend((number, found) for found in _INLINE.findall(line))
    return out


def _documented() -> list[tuple[str, str]]:
    cases: dict[tuple[str, str], None] = {}
    for doc in DOCS:
        lines = doc.read_text(encoding="utf-8").splitlines()
        for number, statement in [*_fenced_statements(lines), *_inline_statements(lines)]:
            cases.setdefault((f"{doc.relative_to(ROOT)}:{number}", statement), None)
    return list(cases)


DOCUMENTED = _documented()


def test_the_docs_name_the_plugin_import_paths() -> None:
    statements = {statement for _, statement in DOCUMENTED}
    assert "from fairque_core import hookimpl" in statements
    assert any(s.startswith("from fairque_core.hookspecs import") for s in statements)
    assert any(s.startswith("from fairque_core.retry import") for s in statements)


@pytest.mark.parametrize(("where", "statement"), DOCUMENTED, ids=[w for w, _ in DOCUMENTED])
def test_a_documented_import_works(where: str, statement: str) -> None:
    try:
        tree = ast.parse(statement.strip())
    except SyntaxError as exc:  # a documented import must at least be Python
        pytest.fail(f"{where}: {statement!r} is not an import statement: {exc}")
    (node,) = tree.body
    if isinstance(node, ast.Import):
        for alias in node.names:
            importlib.import_module(alias.name)
        return
    assert isinstance(node, ast.ImportFrom), (where, statement)
    assert node.module is not None
    assert node.level == 0
    module = importlib.import_module(node.module)
    for alias in node.names:
        if alias.name == "*":
            continue
        if hasattr(module, alias.name):
            continue
        # ``from package import submodule`` names a module, not an attribute
        importlib.import_module(f"{node.module}.{alias.name}")
