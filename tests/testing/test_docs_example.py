"""docs/testing-fairness.md shows the example file verbatim."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "testing-fairness.md"
EXAMPLE = ROOT / "tests" / "testing" / "test_fairness_example.py"
START = "<!-- example: tests/testing/test_fairness_example.py (verbatim) -->\n```python\n"
END = "```\n<!-- end of example -->"


def test_the_doc_shows_the_example_file_verbatim() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert doc.count(START) == 1, "the example's opening marker is missing or repeated"
    shown = doc.split(START, 1)[1].split(END, 1)[0]
    assert shown == EXAMPLE.read_text(encoding="utf-8"), (
        "docs/testing-fairness.md and tests/testing/test_fairness_example.py differ: paste the "
        "file between the markers again"
    )


def test_the_example_uses_the_plugin_fixtures() -> None:
    source = EXAMPLE.read_text(encoding="utf-8")
    assert "def test_every_tier_gets_its_weighted_share(fairque_queue: FairQueue)" in source
    assert "conftest" not in source
