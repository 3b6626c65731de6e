"""Render the kustomizations under deploy/k8s with PyYAML: the subset of kustomize they use.

Supported: `resources` (files and directories), `namespace`, `labels` (pairs, includeSelectors,
includeTemplates) and `images` (newName/newTag/digest). Anything else is refused, so a new
kustomize feature in deploy/k8s fails loudly here instead of being validated half-rendered.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

SUPPORTED = {"apiVersion", "kind", "resources", "namespace", "labels", "images"}
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
    for resource in resources:
        if "namespace" in kustomization:
            resource["metadata"]["namespace"] = kustomization["namespace"]
        for rule in kustomization.get("labels", []):
            _add_labels(resource, rule)
        for container in containers(resource):
            _set_image(container, kustomization.get("images", []))
    return resources
