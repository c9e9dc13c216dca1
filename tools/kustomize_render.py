"""Render a Kustomize directory without kubectl: the subset of Kustomize that deploy/k8s uses.

``kubectl kustomize`` (and the kustomize binary) cannot be installed on the machines this
project is built on, and no PyPI package renders Kustomize, so the CI renders the overlays with
this module and validates the result (tools/check_k8s.py). It implements, faithfully, only what
the manifests use, and refuses everything else by name rather than rendering it wrongly:

* ``resources``: files (one or more YAML documents) and directories (another kustomization);
* ``namespace``: set on every namespaced resource;
* ``labels`` with ``pairs`` (added to ``metadata.labels``; ``includeSelectors`` and
  ``includeTemplates`` are refused);
* ``configMapGenerator`` with ``files`` and ``literals``, with ``generatorOptions.
  disableNameSuffixHash: true`` (the hash suffix is refused: this renderer cannot reproduce
  Kustomize's hash, so a rendering with one would differ from the real one);
* ``patches`` given by ``path`` or inline ``patch``: strategic-merge patches matched by
  apiVersion, kind and name (maps merge recursively; lists of maps whose items all have a
  ``name`` merge item by item on it, other lists are replaced; ``$patch: delete`` removes the
  resource); a patch that matches nothing is an error, as in Kustomize;
* ``images``: ``newName``, ``newTag`` and ``digest`` for every container and init container
  of a pod template.

Usage: ``python tools/kustomize_render.py DIR`` prints the rendering as YAML documents.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

__all__ = ["RenderError", "dump", "render"]

Resource = dict[str, Any]

_KEYS = {
    "apiVersion",
    "kind",
    "namespace",
    "resources",
    "labels",
    "configMapGenerator",
    "generatorOptions",
    "patches",
    "images",
}
_CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PersistentVolume",
    "StorageClass",
    "PriorityClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
}
# Kustomize's default ("legacy") output order, by kind; other kinds follow, by name
_ORDER = [
    "Namespace",
    "ResourceQuota",
    "LimitRange",
    "ServiceAccount",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "ConfigMap",
    "Secret",
    "Service",
    "PersistentVolumeClaim",
    "Deployment",
    "StatefulSet",
    "Job",
    "CronJob",
    "PodDisruptionBudget",
]


class RenderError(Exception):
    """The kustomization uses something this renderer does not support, or is wrong."""


def _load(path: Path) -> list[Resource]:
    try:
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError) as exc:
        raise RenderError(f"{path}: {exc}") from exc
    out = [doc for doc in docs if doc is not None]
    for doc in out:
        if not isinstance(doc, dict):
            raise RenderError(f"{path}: a document is not a mapping")
    return out


def _kustomization(directory: Path) -> dict[str, Any]:
    for name in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
        path = directory / name
        if path.is_file():
            docs = _load(path)
            if len(docs) != 1:
                raise RenderError(f"{path}: expected one document")
            data = docs[0]
            unknown = sorted(set(data) - _KEYS)
            if unknown:
                raise RenderError(f"{path}: unsupported kustomization field(s): {unknown}")
            return data
    raise RenderError(f"{directory}: no kustomization.yaml")


def _key(resource: Resource) -> tuple[str, str, str]:
    meta = resource.get("metadata") or {}
    return (str(resource.get("apiVersion")), str(resource.get("kind")), str(meta.get("name")))


def _configmaps(directory: Path, data: dict[str, Any]) -> list[Resource]:
    generators = data.get("configMapGenerator") or []
    if not generators:
        return []
    options = data.get("generatorOptions") or {}
    if options.get("disableNameSuffixHash") is not True:
        raise RenderError(
            f"{directory}: configMapGenerator needs generatorOptions.disableNameSuffixHash: "
            "true (this renderer cannot reproduce Kustomize's name hash)"
        )
    out = []
    for gen in generators:
        unknown = sorted(set(gen) - {"name", "files", "literals"})
        if unknown:
            raise RenderError(f"{directory}: unsupported configMapGenerator field(s): {unknown}")
        values: dict[str, str] = {}
        for entry in gen.get("files") or []:
            key, _, file = str(entry).rpartition("=")
            path = directory / file
            try:
                values[key or path.name] = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise RenderError(f"{directory}: configMapGenerator {gen['name']}: {exc}") from exc
        for entry in gen.get("literals") or []:
            key, sep, value = str(entry).partition("=")
            if not sep:
                raise RenderError(f"{directory}: literal {entry!r} has no '='")
            values[key] = value
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": gen["name"]},
                "data": values,
            }
        )
    return out


def _merge(base: Any, patch: Any) -> Any:
    """A strategic merge of ``patch`` into ``base`` (the subset the module docstring names)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = _merge(out[key], value)
            else:
                out[key] = copy.deepcopy(value)
        return out
    if (
        isinstance(base, list)
        and isinstance(patch, list)
        and all(isinstance(item, dict) and "name" in item for item in [*base, *patch])
    ):
        merged = [copy.deepcopy(item) for item in base]
        index = {item["name"]: i for i, item in enumerate(merged)}
        for item in patch:
            if item["name"] in index:
                merged[index[item["name"]]] = _merge(merged[index[item["name"]]], item)
            else:
                merged.append(copy.deepcopy(item))
        return merged
    return copy.deepcopy(patch)


def _patch_docs(directory: Path, entry: dict[str, Any]) -> list[Resource]:
    unknown = sorted(set(entry) - {"path", "patch"})
    if unknown:
        raise RenderError(f"{directory}: unsupported patch field(s): {unknown} (only path/patch)")
    if "path" in entry:
        return _load(directory / entry["path"])
    docs = list(yaml.safe_load_all(str(entry.get("patch", ""))))
    return [doc for doc in docs if doc is not None]


def _apply_patches(directory: Path, data: dict[str, Any], resources: list[Resource]) -> None:
    for entry in data.get("patches") or []:
        for patch in _patch_docs(directory, entry):
            if isinstance(patch, list) or "op" in patch:
                raise RenderError(f"{directory}: JSON 6902 patches are not supported")
            key = _key(patch)
            found = [i for i, res in enumerate(resources) if _key(res) == key]
            if not found:
                raise RenderError(f"{directory}: patch {key} matches no resource")
            for i in found:
                if patch.get("$patch") == "delete":
                    resources[i] = {}
                else:
                    resources[i] = _merge(resources[i], patch)
        resources[:] = [res for res in resources if res]


def _containers(resource: Resource) -> Iterator[dict[str, Any]]:
    spec = resource.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec")
    if resource.get("kind") == "CronJob":
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        pod = (job.get("template") or {}).get("spec")
    if resource.get("kind") == "Pod":
        pod = spec
    for field in ("initContainers", "containers"):
        yield from (pod or {}).get(field) or []


def _split_image(image: str) -> tuple[str, str]:
    """``(name, rest)`` where rest is ``:tag``, ``@digest`` or empty."""
    if "@" in image:
        name, digest = image.split("@", 1)
        return name, "@" + digest
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        return image[:colon], image[colon:]
    return image, ""


def _apply_images(data: dict[str, Any], resources: list[Resource]) -> None:
    for entry in data.get("images") or []:
        unknown = sorted(set(entry) - {"name", "newName", "newTag", "digest"})
        if unknown:
            raise RenderError(f"unsupported images field(s): {unknown}")
        for resource in resources:
            for container in _containers(resource):
                name, rest = _split_image(str(container.get("image", "")))
                if name != entry["name"]:
                    continue
                if "digest" in entry:
                    rest = "@" + str(entry["digest"])
                elif "newTag" in entry:
                    rest = ":" + str(entry["newTag"])
                container["image"] = str(entry.get("newName", name)) + rest


def _apply_labels(data: dict[str, Any], resources: list[Resource]) -> None:
    for entry in data.get("labels") or []:
        unknown = sorted(set(entry) - {"pairs"})
        if unknown:
            raise RenderError(f"unsupported labels field(s): {unknown} (only pairs)")
        for resource in resources:
            meta = resource.setdefault("metadata", {})
            labels = meta.setdefault("labels", {})
            labels.update({str(k): str(v) for k, v in entry["pairs"].items()})


def render(directory: Path) -> list[Resource]:
    """The resources the kustomization in ``directory`` renders to, in Kustomize's order."""
    directory = Path(directory)
    data = _kustomization(directory)
    resources: list[Resource] = []
    for entry in data.get("resources") or []:
        path = directory / entry
        if path.is_dir():
            resources.extend(render(path))
        elif path.is_file():
            resources.extend(copy.deepcopy(_load(path)))
        else:
            raise RenderError(f"{directory}: resource {entry!r} not found")
    resources.extend(_configmaps(directory, data))
    _apply_patches(directory, data, resources)
    _apply_images(data, resources)
    _apply_labels(data, resources)
    namespace = data.get("namespace")
    if namespace:
        for resource in resources:
            if resource.get("kind") not in _CLUSTER_SCOPED:
                resource.setdefault("metadata", {})["namespace"] = str(namespace)
    seen: set[tuple[str, str, str]] = set()
    for resource in resources:
        key = _key(resource)
        if key in seen:
            raise RenderError(f"{directory}: {key} is defined twice")
        seen.add(key)

    def order(resource: Resource) -> tuple[int, str, str]:
        kind = str(resource.get("kind"))
        rank = _ORDER.index(kind) if kind in _ORDER else len(_ORDER)
        return (rank, kind, _key(resource)[2])

    return sorted(resources, key=order)


def dump(resources: list[Resource]) -> str:
    """The resources as one multi-document YAML text."""
    return yaml.safe_dump_all(resources, sort_keys=False, default_flow_style=False)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: kustomize_render.py DIR", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(dump(render(Path(argv[0]))))
    except RenderError as exc:
        print(f"kustomize_render: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
