"""Check the Kubernetes manifests: render every overlay, validate it, and check what fairque needs.

For each overlay under deploy/k8s/overlays (or the directories given):

1. render it with tools/kustomize_render.py (kubectl kustomize is not available here);
2. validate every resource with kubernetes-validate, strictly (unknown fields refused), against
   the offline schemas of ``KUBERNETES_VERSION``, the version docs/deployment.md names; KEDA's
   ScaledObject, a custom resource kubernetes-validate has no schema for, is validated against
   deploy/k8s/schemas/keda-scaledobject-v1alpha1.json instead;
3. check fairque's own rules, which no schema knows: the worker's probes ask /healthz and
   /readyz on the port it serves them on (``--metrics-port``, bound to ``0.0.0.0`` with
   ``--metrics-host``), its terminationGracePeriodSeconds is above the
   ``worker.graceful_shutdown_timeout`` of the ConfigMap it mounts, every container has
   resources and runs as non-root, the exporter (which exports ``fairque_queue_depth``) serves
   its probes the same way, the scheduler runs at least 2 replicas, the dashboard's
   token comes from a Secret and its Service selects its pods, each PodDisruptionBudget and the
   ScaledObject name something that exists, and the ScaledObject scales on
   ``fairque_queue_depth``.

Usage: ``python tools/check_k8s.py [DIR ...]``; exits 1 listing every problem found.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kustomize_render import RenderError, render

__all__ = ["KUBERNETES_VERSION", "check_overlay", "check_resources", "overlays"]

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.34.0"
KEDA_SCHEMA = K8S / "schemas" / "keda-scaledobject-v1alpha1.json"

Resource = dict[str, Any]


def overlays() -> list[Path]:
    """Every overlay directory of deploy/k8s."""
    return sorted(p for p in (K8S / "overlays").iterdir() if (p / "kustomization.yaml").is_file())


def _name(resource: Resource) -> str:
    return f"{resource.get('kind')}/{(resource.get('metadata') or {}).get('name')}"


def _validate(resources: list[Resource], version: str) -> list[str]:
    keda = json.loads(KEDA_SCHEMA.read_text(encoding="utf-8"))
    errors = []
    for resource in resources:
        name = _name(resource)
        if resource.get("apiVersion", "").startswith("keda.sh/"):
            if resource.get("kind") != "ScaledObject":
                errors.append(f"{name}: no schema for this KEDA kind")
                continue
            validator = jsonschema.Draft7Validator(keda)
            errors.extend(
                f"{name}: {'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in validator.iter_errors(resource)
            )
            continue
        try:
            kubernetes_validate.validate(resource, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = "/".join(map(str, exc.absolute_path))
            errors.append(f"{name}: {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            errors.append(f"{name}: no schema in Kubernetes {version}: {exc}")
    return errors


def _pod(resource: Resource) -> dict[str, Any]:
    return ((resource.get("spec") or {}).get("template") or {}).get("spec") or {}


def _pod_labels(resource: Resource) -> dict[str, str]:
    template = (resource.get("spec") or {}).get("template") or {}
    return (template.get("metadata") or {}).get("labels") or {}


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    wanted = selector.get("matchLabels", selector) if "matchLabels" in selector else selector
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def _arg(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return str(args[i + 1])
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _graceful_timeout(worker: Resource, by_name: dict[str, Resource]) -> float | None:
    """``worker.graceful_shutdown_timeout`` of the config file the worker's ``--config`` names."""
    container = _pod(worker)["containers"][0]
    config = _arg(container.get("args") or [], "--config")
    if config is None:
        return None
    for mount in container.get("volumeMounts") or []:
        if not config.startswith(mount["mountPath"].rstrip("/") + "/"):
            continue
        key = config[len(mount["mountPath"].rstrip("/")) + 1 :]
        for volume in _pod(worker).get("volumes") or []:
            if volume["name"] == mount["name"] and "configMap" in volume:
                cm = by_name.get(f"ConfigMap/{volume['configMap']['name']}")
                if cm is None or key not in (cm.get("data") or {}):
                    return None
                data = yaml.safe_load(cm["data"][key]) or {}
                value = (data.get("worker") or {}).get("graceful_shutdown_timeout", 30.0)
                return float(value)
    return None


def _check_probes(dep: Resource, port_flag: str, host_flag: str) -> list[str]:
    """/healthz and /readyz probes on the port ``port_flag`` serves, bound to 0.0.0.0."""
    errors = []
    name = _name(dep)
    container = _pod(dep)["containers"][0]
    args = [str(a) for a in container.get("args") or []]
    port = _arg(args, port_flag)
    if port is None:
        errors.append(f"{name}: no {port_flag}: nothing serves /healthz and /readyz")
    if _arg(args, host_flag) != "0.0.0.0":  # noqa: S104 - the pod's port, on purpose
        errors.append(f"{name}: {host_flag} 0.0.0.0 missing: probes cannot reach 127.0.0.1")
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
    for probe_name, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        probe = (container.get(probe_name) or {}).get("httpGet")
        if probe is None:
            errors.append(f"{name}: no HTTP {probe_name}")
            continue
        if probe.get("path") != path:
            errors.append(f"{name}: {probe_name} asks {probe.get('path')}, not {path}")
        target = probe.get("port")
        number = ports.get(target) if isinstance(target, str) else target
        if port is not None and str(number) != port:
            errors.append(f"{name}: {probe_name} port {target} is not {port_flag} {port}")
    return errors


def _check_worker(worker: Resource, by_name: dict[str, Resource]) -> list[str]:
    errors = _check_probes(worker, "--metrics-port", "--metrics-host")
    name = _name(worker)
    timeout = _graceful_timeout(worker, by_name)
    grace = _pod(worker).get("terminationGracePeriodSeconds", 30)
    if timeout is None:
        errors.append(f"{name}: cannot find worker.graceful_shutdown_timeout in its --config")
    elif grace <= timeout:
        errors.append(
            f"{name}: terminationGracePeriodSeconds {grace} is not above "
            f"worker.graceful_shutdown_timeout {timeout}: running tasks would be killed"
        )
    return errors


def _check_pods(deployments: list[Resource]) -> list[str]:
    errors = []
    for dep in deployments:
        pod = _pod(dep)
        if not _selects(dep["spec"].get("selector") or {}, _pod_labels(dep)):
            errors.append(f"{_name(dep)}: its selector does not select its own pods")
        non_root = (pod.get("securityContext") or {}).get("runAsNonRoot") is True
        for container in pod.get("containers") or []:
            where = f"{_name(dep)} container {container.get('name')}"
            resources = container.get("resources") or {}
            if not resources.get("requests") or not resources.get("limits"):
                errors.append(f"{where}: resources need requests and limits")
            ctx = container.get("securityContext") or {}
            if not (non_root or ctx.get("runAsNonRoot") is True or ctx.get("runAsUser")):
                errors.append(f"{where}: does not run as non-root")
            if ctx.get("allowPrivilegeEscalation") is not False:
                errors.append(f"{where}: allowPrivilegeEscalation must be false")
    return errors


def check_resources(resources: list[Resource]) -> list[str]:
    """fairque's rules (the module docstring's third step) over one overlay's rendering."""
    errors: list[str] = []
    by_name = {_name(r): r for r in resources}
    deployments = [r for r in resources if r.get("kind") == "Deployment"]
    errors.extend(_check_pods(deployments))
    worker = by_name.get("Deployment/fairque-worker")
    if worker is None:
        errors.append("no Deployment/fairque-worker")
    else:
        errors.extend(_check_worker(worker, by_name))
    exporter = by_name.get("Deployment/fairque-exporter")
    if exporter is None:
        errors.append("no Deployment/fairque-exporter: nothing exports fairque_queue_depth")
    else:
        errors.extend(_check_probes(exporter, "--port", "--host"))
    scheduler = by_name.get("Deployment/fairque-scheduler")
    if scheduler is None:
        errors.append("no Deployment/fairque-scheduler")
    elif scheduler["spec"].get("replicas", 1) < 2:
        errors.append("Deployment/fairque-scheduler: fewer than 2 replicas (no standby)")
    dashboard = by_name.get("Deployment/fairque-dashboard")
    if dashboard is None:
        errors.append("no Deployment/fairque-dashboard")
    else:
        env = {e["name"]: e for e in _pod(dashboard)["containers"][0].get("env") or []}
        token = env.get("FAIRQUE_DASHBOARD_TOKEN", {})
        if "secretKeyRef" not in (token.get("valueFrom") or {}):
            errors.append(f"{_name(dashboard)}: FAIRQUE_DASHBOARD_TOKEN must come from a Secret")
        service = by_name.get("Service/fairque-dashboard")
        if service is None or not _selects(
            service["spec"].get("selector") or {}, _pod_labels(dashboard)
        ):
            errors.append("Service/fairque-dashboard is missing or does not select the dashboard")
    for pdb in (r for r in resources if r.get("kind") == "PodDisruptionBudget"):
        if not any(_selects(pdb["spec"]["selector"], _pod_labels(d)) for d in deployments):
            errors.append(f"{_name(pdb)}: selects no Deployment's pods")
    scaled = [r for r in resources if r.get("kind") == "ScaledObject"]
    if not scaled:
        errors.append("no ScaledObject: workers do not scale on queue depth")
    for obj in scaled:
        target = obj["spec"]["scaleTargetRef"]["name"]
        if f"Deployment/{target}" not in by_name:
            errors.append(f"{_name(obj)}: scaleTargetRef {target} is not a Deployment here")
        queries = [t["metadata"].get("query", "") for t in obj["spec"]["triggers"]]
        if not any("fairque_queue_depth" in q for q in queries):
            errors.append(f"{_name(obj)}: no trigger queries fairque_queue_depth")
    for resource in resources:
        if resource.get("kind") == "Secret":
            continue
        for container in _pod(resource).get("containers") or []:
            for env in container.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                secret = by_name.get(f"Secret/{ref['name']}") if ref else None
                if (
                    ref
                    and secret is not None
                    and ref["key"]
                    not in {
                        *(secret.get("stringData") or {}),
                        *(secret.get("data") or {}),
                    }
                ):
                    errors.append(f"{_name(resource)}: Secret {ref['name']} has no {ref['key']}")
    return errors


def check_overlay(directory: Path, version: str = KUBERNETES_VERSION) -> list[str]:
    """Every problem of one overlay (an empty list: it passes)."""
    try:
        resources = render(directory)
    except RenderError as exc:
        return [f"render: {exc}"]
    return _validate(resources, version) + check_resources(resources)


def main(argv: list[str]) -> int:
    dirs = [Path(a) for a in argv] or overlays()
    failed = False
    for directory in dirs:
        errors = check_overlay(directory)
        shown = (
            directory.resolve().relative_to(ROOT)
            if directory.resolve().is_relative_to(ROOT)
            else directory
        )
        if errors:
            failed = True
            print(f"{shown}: {len(errors)} problem(s)")
            for error in errors:
                print(f"  {error}")
        else:
            count = len(render(directory))
            print(f"{shown}: ok ({count} resources, Kubernetes {KUBERNETES_VERSION}, strict)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
