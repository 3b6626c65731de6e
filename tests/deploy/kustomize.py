"""Render the kustomizations under deploy/k8s with PyYAML: the subset of kustomize they use.

Supported: `resources` (files and directories), `namespace`, `labels` (pairs, includeSelectors,
includeTemplates), `images` (newName/newTag/digest) and `patches` given by `path` (strategic
merge: maps merge, lists of named items merge by name, null deletes a key). Anything else is refused, so a new
kustomize feature in deploy/k8s fails loudly here instead of being validated half-rendered.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

SUPPORTED = {"apiVersion", "kind", "resources", "namespace", "labels", "images", "patches"}
Resource = dict[str, Any]


def pod_specs(resource: Resource) -> list[dict[str, Any]]:
    """The pod specs inside a workload, and KServe's pod-spec-like runtime/predictor specs."""
    spec = resource.get("spec", {})
    kind = resource["kind"]
    if kind in {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}:
        return [spec["template"]["spec"]]
    if kind == "CronJob":
        return [spec["jobTemplate"]["spec"]["template"]["spec"]]
    if kind == "Pod" or kind == "ServingRuntime":
        return [spec]
    return []


def containers(resource: Resource) -> list[dict[str, Any]]:
    return [
        c for ps in pod_specs(resource) for key in ("initContainers", "containers") for c in ps.get(key, [])
    ]


def _set_image(container: dict[str, Any], images: list[dict[str, str]]) -> None:
    image = container["image"]
    name = image.split("@")[0].rsplit(":", 1)[0] if ":" in image.split("/")[-1] else image.split("@")[0]
    for rule in images:
        if rule["name"] != name:
            continue
        new_name = rule.get("newName", name)
        if "digest" in rule:
            container["image"] = f"{new_name}@{rule['digest']}"
        elif "newTag" in rule:
            container["image"] = f"{new_name}:{rule['newTag']}"
        else:
            container["image"] = new_name + image[len(name) :]


def _add_labels(resource: Resource, rule: dict[str, Any]) -> None:
    pairs = rule["pairs"]
    resource.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
    if rule.get("includeSelectors"):
        raise ValueError("labels with includeSelectors are not supported by this renderer")
    if rule.get("includeTemplates") and "template" in resource.get("spec", {}):
        resource["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {}).update(pairs)


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        current = target.get(key)
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(current, dict):
            _merge(current, value)
        elif (
            isinstance(value, list)
            and isinstance(current, list)
            and all(isinstance(item, dict) and "name" in item for item in value)
        ):
            by_name = {item.get("name"): item for item in current if isinstance(item, dict)}
            for item in value:
                if item["name"] in by_name:
                    _merge(by_name[item["name"]], item)
                else:
                    current.append(copy.deepcopy(item))
        else:
            target[key] = copy.deepcopy(value)


def _patch(resources: list[Resource], directory: Path, entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        if set(entry) != {"path"}:
            raise ValueError(f"{directory}: only patches given by path are supported by this renderer")
        for patch in yaml.safe_load_all((directory / entry["path"]).read_text()):
            key = (patch["kind"], patch["metadata"]["name"])
            targets = [r for r in resources if (r["kind"], r["metadata"]["name"]) == key]
            if len(targets) != 1:
                raise ValueError(f"{directory / entry['path']}: patch target {key} not found once")
            _merge(targets[0], patch)


def render(directory: Path) -> list[Resource]:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unsupported = set(kustomization) - SUPPORTED
    if unsupported:
        raise ValueError(
            f"{directory}/kustomization.yaml uses {sorted(unsupported)}, which this renderer lacks"
        )
    resources: list[Resource] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        if path.is_dir():
            resources.extend(render(path))
        else:
            resources.extend(copy.deepcopy(doc) for doc in yaml.safe_load_all(path.read_text()) if doc)
    _patch(resources, directory, kustomization.get("patches", []))
    for resource in resources:
        if "namespace" in kustomization:
            resource["metadata"]["namespace"] = kustomization["namespace"]
        for rule in kustomization.get("labels", []):
            _add_labels(resource, rule)
        for container in containers(resource):
            _set_image(container, kustomization.get("images", []))
    return resources
