"""The Kubernetes manifests (deploy/k8s): each overlay renders, validates and keeps fairque's rules.

The same check runs in .ci/run (``python tools/check_k8s.py``). Each seeded defect below is
applied to a copy of deploy/k8s in a temporary directory and must make the check fail, so a
check that stopped looking would turn this test red.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import REPO, load_tool

check_k8s = load_tool("check_k8s")
kustomize_render = load_tool("kustomize_render")

K8S = REPO / "deploy" / "k8s"
OVERLAYS = ["dev", "prod"]


def test_the_overlays_are_the_ones_checked() -> None:
    assert [p.name for p in check_k8s.overlays()] == OVERLAYS


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_passes(overlay: str) -> None:
    assert check_k8s.check_overlay(K8S / "overlays" / overlay) == []


def test_the_docs_name_the_kubernetes_version_checked() -> None:
    major_minor = ".".join(check_k8s.KUBERNETES_VERSION.split(".")[:2])
    text = (REPO / "docs" / "deployment.md").read_text(encoding="utf-8")
    assert f"Kubernetes {major_minor}" in text


def _by_name(overlay: str) -> dict[str, dict]:
    resources = kustomize_render.render(K8S / "overlays" / overlay)
    return {f"{r['kind']}/{r['metadata']['name']}": r for r in resources}


def test_the_dev_overlay_merges_its_patches_into_the_base() -> None:
    rendered = _by_name("dev")
    worker = rendered["Deployment/fairque-worker"]
    container = worker["spec"]["template"]["spec"]["containers"][0]
    assert worker["metadata"]["namespace"] == "fairque-dev"
    assert worker["metadata"]["labels"]["app.kubernetes.io/part-of"] == "fairque"
    assert worker["spec"]["replicas"] == 1
    assert container["image"] == "localhost/fairque:dev"
    assert container["resources"]["requests"]["cpu"] == "100m"  # the patch's
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"  # the base's, kept
    assert "--metrics-host" in container["args"]
    assert rendered["ScaledObject/fairque-worker"]["spec"]["maxReplicaCount"] == 3
    assert rendered["ScaledObject/fairque-worker"]["spec"]["triggers"]  # kept from the base
    config = rendered["ConfigMap/fairque-config"]["data"]["fairque.yaml"]
    assert config == (K8S / "base" / "fairque.yaml").read_text(encoding="utf-8")
    assert "Deployment/fairque-redis" in rendered


def test_the_prod_overlay_renders_no_placeholder_secret() -> None:
    rendered = _by_name("prod")
    assert "Secret/fairque-secrets" not in rendered
    assert "Secret/fairque-secrets" in _by_name("dev")
    images = {
        c["image"]
        for r in rendered.values()
        if r["kind"] == "Deployment"
        for c in r["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"ghcr.io/fairque/fairque:0.1.0"}


def _edit(relative: str, old: str, new: str) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        path = root / relative
        text = path.read_text(encoding="utf-8")
        assert old in text, f"seed {old!r} not in {relative}"
        path.write_text(text.replace(old, new, 1), encoding="utf-8")

    return apply


# (id, defect, a pattern the problems must include)
DEFECTS = [
    ("schema-unknown-field", _edit("base/worker.yaml", "livenessProbe:", "livenesProbe:"),
     r"'livenesProbe' was unexpected"),
    ("schema-wrong-type", _edit("base/pdb.yaml", "maxUnavailable: 1", "maxUnavailable: [1]"),
     r"PodDisruptionBudget/fairque-worker: spec/maxUnavailable"),
    ("keda-schema", _edit("base/scaledobject.yaml", 'threshold: "100"', "threshold: 100"),
     r"ScaledObject/fairque-worker: .*threshold"),
    ("keda-unknown-field", _edit("base/scaledobject.yaml", "cooldownPeriod:", "coolDown:"),
     r"'coolDown' was unexpected"),
    ("grace-below-shutdown",
     _edit("base/fairque.yaml", "graceful_shutdown_timeout: 30.0", "graceful_shutdown_timeout: 60"),
     r"terminationGracePeriodSeconds 45 is not above worker.graceful_shutdown_timeout 60"),
    ("liveness-path", _edit("base/worker.yaml", "path: /healthz", "path: /health"),
     r"livenessProbe asks /health, not /healthz"),
    ("readiness-port", _edit("base/worker.yaml", "- --metrics-port\n            - \"9100\"",
                             "- --metrics-port\n            - \"9101\""),
     r"readinessProbe port metrics is not --metrics-port 9101"),
    ("metrics-loopback", _edit("base/worker.yaml", "- 0.0.0.0", "- 127.0.0.1"),
     r"--metrics-host 0.0.0.0 missing"),
    ("exporter-loopback", _edit("base/exporter.yaml", "- --host\n            - 0.0.0.0", ""),
     r"fairque-exporter: --host 0.0.0.0 missing"),
    ("exporter-missing", _edit("base/kustomization.yaml", "  - exporter.yaml\n", ""),
     r"no Deployment/fairque-exporter"),
    ("one-scheduler", _edit("base/scheduler.yaml", "replicas: 2", "replicas: 1"),
     r"fairque-scheduler: fewer than 2 replicas"),
    ("token-typo",
     _edit("base/dashboard.yaml", "key: dashboard-token\n", "key: dashboard-token\n"
           "                  x: y\n"),
     r"'x' was unexpected"),
    ("token-literal",
     _edit("base/dashboard.yaml", "name: FAIRQUE_DASHBOARD_TOKEN\n              valueFrom:",
           "name: FAIRQUE_DASHBOARD_TOKEN\n              value: oops\n              x-from:"),
     r"FAIRQUE_DASHBOARD_TOKEN must come from a Secret"),
    ("no-resources", _edit("base/scheduler.yaml", "limits:\n              memory: 192Mi", ""),
     r"fairque-scheduler container scheduler: resources need requests and limits"),
    ("pdb-selects-nothing",
     _edit("base/pdb.yaml", "app.kubernetes.io/name: fairque-scheduler", "app: scheduler"),
     r"PodDisruptionBudget/fairque-scheduler: selects no Deployment"),
    ("scale-wrong-target",
     _edit("base/scaledobject.yaml", "scaleTargetRef:\n    name: fairque-worker",
           "scaleTargetRef:\n    name: fairque-workers"),
     r"scaleTargetRef fairque-workers is not a Deployment"),
    ("scale-wrong-metric",
     _edit("base/scaledobject.yaml", "sum(fairque_queue_depth", "sum(queue_depth"),
     r"no trigger queries fairque_queue_depth"),
    ("secret-key", _edit("base/secret.yaml", "redis-url:", "redis_url:"),
     r"Secret fairque-secrets has no redis-url"),
    ("unsupported-kustomize",
     _edit("overlays/dev/kustomization.yaml", "namespace:", "namePrefix: x-\nnamespace:"),
     r"unsupported kustomization field\(s\): \['namePrefix'\]"),
    ("patch-matches-nothing",
     _edit("overlays/prod/worker.yaml", "name: fairque-worker", "name: fairque-wrker"),
     r"matches no resource"),
]  # fmt: skip


@pytest.mark.parametrize(("defect", "expected"), [(d, e) for _, d, e in DEFECTS],
                         ids=[i for i, _, _ in DEFECTS])  # fmt: skip
def test_a_seeded_defect_fails_the_check(
    tmp_path: Path, defect: Callable[[Path], None], expected: str
) -> None:
    root = tmp_path / "k8s"
    shutil.copytree(K8S, root)
    defect(root)
    problems: list[str] = []
    for overlay in OVERLAYS:  # dev, then prod if dev did not show it
        problems += check_k8s.check_overlay(root / "overlays" / overlay)
        if any(re.search(expected, p) for p in problems):
            return
    pytest.fail(f"no problem matches {expected!r}: {problems}")


def test_the_ci_command_exits_non_zero_on_a_defect(tmp_path: Path) -> None:
    root = tmp_path / "k8s"
    shutil.copytree(K8S, root)
    _edit("base/worker.yaml", "path: /readyz", "path: /ready")(root)
    tool = str(REPO / "tools" / "check_k8s.py")
    bad = subprocess.run(
        [sys.executable, tool, str(root / "overlays" / "dev")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "readinessProbe asks /ready, not /readyz" in bad.stdout
    good = subprocess.run([sys.executable, tool], capture_output=True, text=True, check=False)
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.count(": ok (") == len(OVERLAYS)
