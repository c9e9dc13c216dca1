"""The examples of docs/workflows.md run: every block after a ``<!-- tested -->`` line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from fairque_core import FairQueueConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "workflows.md"
BLOCK = re.compile(r"<!-- tested -->\n```(\w+)\n(.*?)```", re.S)
BLOCKS = BLOCK.findall(DOC.read_text(encoding="utf-8"))


def test_the_doc_has_tested_examples() -> None:
    assert {lang for lang, _ in BLOCKS} >= {"python", "yaml"}


@pytest.mark.parametrize(("lang", "code"), BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_example_runs(lang: str, code: str) -> None:
    if lang == "python":
        exec(compile(code, str(DOC), "exec"), {"__name__": "workflows_doc"})
    elif lang == "yaml":
        config = FairQueueConfig.from_dict(yaml.safe_load(code), env={})
        assert [s.name for s in config.schedule_values()]
    else:
        pytest.fail(f"no runner for {lang} blocks")
