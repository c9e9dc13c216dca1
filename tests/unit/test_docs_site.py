"""The docs site (mkdocs.yml): its nav, its API reference, its benchmark charts, and its build.

Fast tests read the files: every page is in the nav and every nav entry exists, the API reference
has one page per public package, the benchmarks page and the README show the charts, the link
hook rewrites what leaves docs/. The ``slow`` ones run ``mkdocs build --strict`` (about a minute
here, mkdocstrings reading every package): the real site builds, its reference lists every name
of each package's ``__all__``, and a broken link in a copy fails the build.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# the packages whose __all__ is the public API (ADR 23); fairque_cli's is its version only
PUBLIC_PACKAGES = [
    "fairque_core",
    "fairque_redis",
    "fairque_plugins",
    "fairque_testing",
    "fairque_dashboard",
    "fairque_cli",
]
CHARTS = [
    "img/bench-flood.png",  # light tenants' wait under a flood
    "img/bench-peers.png",  # peers side by side
    "img/bench-tenants.png",  # claim rate against tenants
    "img/bench-partitions.png",  # partitions
]


class _Loader(yaml.SafeLoader):
    """mkdocs.yml may hold !!python/name tags (Material's extensions): read them as text."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: suffix)


def _config() -> dict[str, Any]:
    return yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)


def _nav_pages(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return []


def test_every_nav_page_exists_and_every_page_is_in_the_nav() -> None:
    nav = _nav_pages(_config()["nav"])
    assert len(nav) == len(set(nav)), "a page is in the nav twice"
    for page in nav:
        assert (DOCS / page).is_file(), f"nav names {page}, which does not exist"
    pages = {
        p.relative_to(DOCS).as_posix()
        for p in DOCS.rglob("*.md")
        if p.relative_to(DOCS).parts[0] != "adr"
    }
    assert pages - set(nav) == set(), "pages missing from the nav"
    assert "adr/README.md" in nav  # the ADR index; the records themselves are reached from it


def test_the_api_reference_has_a_page_per_public_package() -> None:
    for package in PUBLIC_PACKAGES:
        page = (DOCS / "reference" / f"{package}.md").read_text(encoding="utf-8")
        assert re.search(rf"^::: {package}$", page, re.MULTILINE), package
        assert f"reference/{package}.md" in _nav_pages(_config()["nav"])
    options = _config()["plugins"][1]["mkdocstrings"]["handlers"]["python"]["options"]
    # "public": the names of __all__ where a module has one (griffe), so the page is __all__
    assert options["filters"] == "public"


def test_the_benchmarks_page_and_the_readme_show_the_charts() -> None:
    page = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    for chart in CHARTS:
        assert f"]({chart})" in page, chart
        assert (DOCS / chart).is_file(), chart
    assert "## Method" in page
    assert "](benchmarks-history.md)" in page
    assert "](benchmarks-history.md)" in (DOCS / "performance.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](docs/img/bench-flood.png)" in readme


def _hook() -> Any:
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "tools/mkdocs_hooks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("src_uri", "markdown", "expected"),
    [
        ("cli.md", "[x](../src/a/b.py)", "[x](https://example.org/r/blob/main/src/a/b.py)"),
        ("cli.md", "[x](../README.md#set-up)", "[x](https://example.org/r/blob/main/README.md#set-up)"),
        ("cli.md", "[x](../examples/)", "[x](https://example.org/r/tree/main/examples/)"),
        ("adr/0001-x.md", "[x](../../bench/compare.py)", "[x](https://example.org/r/blob/main/bench/compare.py)"),
        ("adr/0001-x.md", "[x](../fairness.md#a)", "[x](../fairness.md#a)"),  # a page: checked
        ("cli.md", "[x](fairness.md)", "[x](fairness.md)"),
    ],
)  # fmt: skip
def test_the_hook_points_links_that_leave_docs_at_the_repository(
    src_uri: str, markdown: str, expected: str
) -> None:
    page = SimpleNamespace(file=SimpleNamespace(src_uri=src_uri))
    config = {"repo_url": "https://example.org/r/"}
    assert _hook().on_page_markdown(markdown, page, config, None) == expected


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_site_builds_strictly_and_its_reference_lists_every_public_name(
    tmp_path: Path,
) -> None:
    built = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stderr[-4000:]
    for package in PUBLIC_PACKAGES:
        html = (tmp_path / "site" / "reference" / package / "index.html").read_text("utf-8")
        ids = set(re.findall(r'id="([^"]+)"', html))
        names = importlib.import_module(package).__all__
        missing = [name for name in names if f"{package}.{name}" not in ids]
        assert missing == [], f"{package}: not in the API reference: {missing}"
    bench = (tmp_path / "site" / "benchmarks" / "index.html").read_text("utf-8")
    for chart in CHARTS:
        assert f'src="../{chart}"' in bench, chart


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    # a copy of the site without the API reference's directives (seconds, not a minute)
    root = tmp_path / "repo"
    shutil.copytree(DOCS, root / "docs")
    shutil.copy(ROOT / "mkdocs.yml", root / "mkdocs.yml")
    (root / "tools").mkdir()
    shutil.copy(ROOT / "tools/mkdocs_hooks.py", root / "tools/mkdocs_hooks.py")
    (root / "src").symlink_to(ROOT / "src")
    for page in (root / "docs" / "reference").glob("fairque_*.md"):
        page.write_text(f"# {page.stem}\n", encoding="utf-8")
    good = _build(root / "mkdocs.yml", tmp_path / "good")
    assert good.returncode == 0, good.stderr[-3000:]
    tutorial = root / "docs" / "tutorial.md"
    text = tutorial.read_text(encoding="utf-8")
    tutorial.write_text(text.replace("](delivery.md)", "](delivry.md)", 1), encoding="utf-8")
    bad = _build(root / "mkdocs.yml", tmp_path / "bad")
    assert bad.returncode != 0
    assert "delivry.md" in bad.stderr, bad.stderr[-3000:]
