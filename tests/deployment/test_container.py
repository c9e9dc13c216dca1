"""The container image, built and run with podman: the demo inside it, a worker's health and stop.

Slow (a few minutes the first time). What it needs, and why each piece is there:

* podman with runc: Debian's podman defaults to crun, which refuses this machine's hybrid
  cgroup layout ("cgroups in hybrid mode not supported"); runc runs it. The machine's hard
  ``RLIMIT_NOFILE``/``RLIMIT_NPROC`` are below podman's defaults for root and cannot be raised
  (no CAP_SYS_RESOURCE), hence the explicit ``--ulimit`` values.
* a base image made here: no container registry is reachable from these machines, so the
  Dockerfile's pinned ``python:3.12.8-slim-bookworm`` cannot be pulled. The test builds a Debian
  bookworm root file system with debootstrap (Debian's packages are reachable), imports it as
  ``localhost/fairque-test-base:bookworm`` and passes it as ``--build-arg PYTHON_IMAGE``. It
  carries the machine's CA bundle (the package index is reached through an egress proxy) as
  ``SSL_CERT_FILE``/``PIP_CERT``; the real base needs neither.
* host networking: the worker and the demo reach the test's Redis on 127.0.0.1.

.ci/run installs podman, runc and debootstrap (root is needed for all three).
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import missing_server
from fairque_redis import connect

from .conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.timeout(1800)]

BASE = "localhost/fairque-test-base:bookworm"
IMAGE = "localhost/fairque:test"
PODMAN = ["podman", "--runtime", "runc"]
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
HEALTH_PORT = 9100  # the Dockerfile's HEALTHCHECK asks this port


def _run(args: list[str], timeout: float = 600, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False, **kw)  # type: ignore[call-overload]


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "podman, runc and debootstrap need root here"
    for tool in ("podman", "runc", "debootstrap"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt-get install podman runc debootstrap)"
    return None


def _base_image(workdir: Path) -> None:
    if _run(["podman", "image", "exists", BASE]).returncode == 0:
        return
    rootfs = workdir / "rootfs"
    made = _run(
        [
            "debootstrap",
            "--variant=minbase",
            "--include=python3,python3-venv,ca-certificates",
            "bookworm",
            str(rootfs),
            "http://deb.debian.org/debian",
        ],
        timeout=1200,
    )
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    shutil.copyfile(bundle, rootfs / "etc/ssl/certs/ca-certificates.crt")
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    env = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    imported = subprocess.run(
        [
            "podman", "import",
            "--change", f"ENV PATH={env}",
            "--change", f"ENV SSL_CERT_FILE={bundle}",
            "--change", f"ENV PIP_CERT={bundle}",
            "-", BASE,
        ],
        stdin=tar.stdout, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    tar.wait()
    assert imported.returncode == 0, imported.stderr


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    reason = _missing()
    if reason:
        missing_server(reason)
    # pytest-xdist may run this module's tests on two workers: one builds at a time (the
    # second finds the base image and every layer cached)
    lock_path = Path(tempfile.gettempdir()) / "fairque-podman-build.lock"
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_image(tmp_path_factory)


def _build_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    _base_image(tmp_path_factory.mktemp("podman-base"))
    built = _run(
        [
            *PODMAN, "build", "--format", "docker", "--network", "host", *LIMITS,
            "--build-arg", f"PYTHON_IMAGE={BASE}",
            "-f", str(REPO / "deploy/docker/Dockerfile"), "-t", IMAGE, str(REPO),
        ],
        timeout=1200,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-2000:]
    return IMAGE


def _podman_run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return _run([*PODMAN, "run", "--network", "host", *LIMITS, *args], timeout=timeout)


def test_the_image_runs_fairque_as_a_non_root_user_in_exec_form(image: str) -> None:
    inspected = _run(["podman", "image", "inspect", image])
    assert inspected.returncode == 0, inspected.stderr
    inspect = json.loads(inspected.stdout)[0]
    assert inspect["Config"]["User"] == "10001:10001"
    assert inspect["Config"]["Entrypoint"] == ["fairque"]
    assert any("/healthz" in part for part in inspect["Healthcheck"]["Test"])
    who = _podman_run("--rm", "--entrypoint", "id", image, "-u")
    assert who.stdout.strip() == "10001", who.stderr


def test_the_demo_runs_inside_the_image(image: str, redis7_server: object) -> None:
    url = redis7_server.url  # type: ignore[attr-defined]
    demo = _podman_run("--rm", image, "--url", url, "demo", "--duration", "12", "--check")
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "Jain" in demo.stdout


def _load_example_tasks() -> object:
    spec = importlib.util.spec_from_file_location("example_tasks", REPO / "examples/tasks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def worker_name() -> Iterator[str]:
    name = f"fairque-test-{uuid.uuid4().hex[:8]}"
    yield name
    _run(["podman", "rm", "--force", "--time", "0", name])


def test_a_worker_in_the_image_is_healthy_runs_tasks_and_stops_on_sigterm(
    image: str, redis7_server: object, worker_name: str
) -> None:
    with socket.socket() as probe:  # the HEALTHCHECK's port, on the host's network
        try:
            probe.bind(("127.0.0.1", HEALTH_PORT))
        except OSError:
            pytest.fail(f"port {HEALTH_PORT} is taken: the image's HEALTHCHECK asks it")
    url = redis7_server.url  # type: ignore[attr-defined]
    queue_name = f"container-{uuid.uuid4().hex[:8]}"
    started = _podman_run(
        "--detach", "--name", worker_name, image,
        "--url", url, "--queue", queue_name,
        "worker", "--handler", "tasks:registry", "--metrics-port", str(HEALTH_PORT),
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    tasks = _load_example_tasks()
    with connect(url, queue=queue_name) as queue:
        handles = [
            queue.push(tasks.thumbnail(tenant, f"{tenant}/{n}.jpg"))  # type: ignore[attr-defined]
            for tenant in ("acme", "globex")
            for n in range(10)
        ]
        # every task runs in the container (get waits for each result)
        results = [handle.get(timeout=120) for handle in handles]
    assert all(r["ok"] for r in results)
    health = _run(["podman", "healthcheck", "run", worker_name])
    assert health.returncode == 0, health.stdout + health.stderr
    began = time.monotonic()
    stopped = _run(["podman", "stop", "--time", "60", worker_name], timeout=120)
    took = time.monotonic() - began
    assert stopped.returncode == 0, stopped.stderr
    code = _run(["podman", "inspect", "--format", "{{.State.ExitCode}}", worker_name])
    logs = _run(["podman", "logs", worker_name])
    # SIGTERM reached the worker (PID 1, exec form): it drained and exited by itself with 0,
    # long before podman's 60 s deadline and its SIGKILL (which would give 137)
    assert code.stdout.strip() == "0", logs.stdout[-3000:] + logs.stderr[-3000:]
    assert took < 30, took
