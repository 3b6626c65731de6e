"""deploy/k8s: schema-valid for Kubernetes, consistent across resources, and drain-safe."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy.conftest import REPO, find_tool
from tests.deploy.kustomize import Resource, containers, pod_specs, render

K8S = REPO / "deploy" / "k8s"
KUSTOMIZATIONS = ["base", "kserve", "http-probes"]
# 1.27: native gRPC probes are GA from there on. The newest schema kubernetes-validate ships.
KUBERNETES_VERSIONS = ["1.27", kubernetes_validate.latest_version()]
CRD_GROUPS = {"monitoring.coreos.com", "serving.kserve.io"}
SERVER_LABELS = {"app.kubernetes.io/name": "attnserve", "app.kubernetes.io/component": "server"}


def is_crd(resource: Resource) -> bool:
    return resource["apiVersion"].split("/")[0] in CRD_GROUPS


@pytest.fixture(scope="module")
def base() -> dict[tuple[str, str], Resource]:
    return {(r["kind"], r["metadata"]["name"]): r for r in render(K8S / "base")}


@pytest.fixture(scope="module")
def kserve() -> dict[tuple[str, str], Resource]:
    return {(r["kind"], r["metadata"]["name"]): r for r in render(K8S / "kserve")}


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _port_names(resource: Resource) -> set[str]:
    return {p["name"] for c in containers(resource) for p in c.get("ports", [])}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_core_resources_match_the_kubernetes_schema(kustomization: str, version: str) -> None:
    resources = render(K8S / kustomization)
    checked = 0
    for resource in resources:
        if is_crd(resource):
            continue
        kubernetes_validate.validate(resource, version, strict=True)
        checked += 1
    if kustomization == "base":
        assert checked >= 8


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_kserve_runtime_containers_match_the_pod_schema(
    kserve: dict[tuple[str, str], Resource], version: str
) -> None:
    runtime = kserve[("ServingRuntime", "attnserve")]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "attnserve-runtime"},
        "spec": {"containers": runtime["spec"]["containers"]},
    }
    kubernetes_validate.validate(pod, version, strict=True)


def test_renderer_matches_kubectl_kustomize_when_available() -> None:
    kubectl = find_tool("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed; the PyYAML renderer alone is used")
    for name in KUSTOMIZATIONS:
        out = subprocess.run(
            [kubectl, "kustomize", str(K8S / name)], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        theirs = [doc for doc in yaml.safe_load_all(out.stdout) if doc]

        def key(r: Resource) -> tuple[str, str]:
            return r["kind"], r["metadata"]["name"]

        assert sorted(render(K8S / name), key=key) == sorted(theirs, key=key)


def test_deployment_probes_use_native_grpc_health(base: dict[tuple[str, str], Resource]) -> None:
    deployment = base[("Deployment", "attnserve")]
    (container,) = containers(deployment)
    config = base[("ConfigMap", "attnserve-config")]["data"]
    grpc_port = int(config["ATTNSERVE_PORT"])
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == grpc_port, probe
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {
        "grpc": grpc_port,
        "http": int(config["ATTNSERVE_HTTP_PORT"]),
        "metrics": int(config["ATTNSERVE_METRICS_PORT"]),
    }
    assert container["envFrom"] == [{"configMapRef": {"name": "attnserve-config"}}]


def test_http_probes_option_probes_the_v2_health_routes() -> None:
    rendered = {(r["kind"], r["metadata"]["name"]): r for r in render(K8S / "http-probes")}
    (container,) = containers(rendered[("Deployment", "attnserve")])
    paths = {
        "startupProbe": "/v2/health/ready",
        "readinessProbe": "/v2/health/ready",
        "livenessProbe": "/v2/health/live",
    }
    for probe, path in paths.items():
        assert "grpc" not in container[probe], probe
        assert container[probe]["httpGet"] == {"path": path, "port": "http"}, probe
    assert container[probe]["periodSeconds"] > 0  # the base's timing is kept
    service_ports = {p["name"]: p for p in rendered[("Service", "attnserve")]["spec"]["ports"]}
    assert service_ports["http"]["targetPort"] == "http"


def test_termination_grace_covers_prestop_and_drain(base: dict[tuple[str, str], Resource]) -> None:
    deployment = base[("Deployment", "attnserve")]
    spec = pod_specs(deployment)[0]
    (container,) = containers(deployment)
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pre_stop = float(command[1])
    drain = float(base[("ConfigMap", "attnserve-config")]["data"]["ATTNSERVE_GRACE_SECONDS"])
    assert spec["terminationGracePeriodSeconds"] > pre_stop + drain, (
        "SIGKILL would cut the drain short: raise terminationGracePeriodSeconds"
    )


def test_pods_run_non_root_on_a_read_only_root_with_writable_tmp(
    base: dict[tuple[str, str], Resource],
) -> None:
    for resource in base.values():
        for spec in pod_specs(resource):
            assert spec["securityContext"]["runAsNonRoot"] is True
            assert spec["securityContext"]["runAsUser"] != 0
            volumes = {v["name"]: v for v in spec.get("volumes", [])}
            for container in spec["containers"]:
                sc = container["securityContext"]
                assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
                assert sc["capabilities"]["drop"] == ["ALL"]
                mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
                assert "emptyDir" in volumes[mounts["/tmp"]], f"{container['name']}: /tmp must be an emptyDir"
                assert container["resources"]["requests"] and container["resources"]["limits"]


def test_services_select_the_server_pods(base: dict[tuple[str, str], Resource]) -> None:
    pod_labels = base[("Deployment", "attnserve")]["spec"]["template"]["metadata"]["labels"]
    port_names = _port_names(base[("Deployment", "attnserve")])
    services = [r for (kind, _), r in base.items() if kind == "Service"]
    assert {s["metadata"]["name"] for s in services} == {"attnserve", "attnserve-headless"}
    for service in services:
        assert _matches(service["spec"]["selector"], pod_labels)
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names
    assert base[("Service", "attnserve-headless")]["spec"]["clusterIP"] == "None"


def test_autoscaler_and_disruption_budget_target_the_deployment(
    base: dict[tuple[str, str], Resource],
) -> None:
    deployment = base[("Deployment", "attnserve")]
    hpa = base[("HorizontalPodAutoscaler", "attnserve")]["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "attnserve"}
    assert 1 <= hpa["minReplicas"] <= hpa["maxReplicas"]
    pdb = base[("PodDisruptionBudget", "attnserve")]["spec"]
    assert _matches(pdb["selector"]["matchLabels"], deployment["spec"]["template"]["metadata"]["labels"])
    assert pdb["minAvailable"] < hpa["minReplicas"], "the budget must still allow draining a node"


def test_models_volume_is_shared_between_the_job_and_the_servers(
    base: dict[tuple[str, str], Resource],
) -> None:
    claim = base[("PersistentVolumeClaim", "attnserve-models")]
    assert "ReadWriteMany" in claim["spec"]["accessModes"], "replicas on several nodes share the repository"
    job_spec = pod_specs(base[("Job", "attnserve-bootstrap-models")])[0]
    server_spec = pod_specs(base[("Deployment", "attnserve")])[0]
    for spec in (job_spec, server_spec):
        claims = [
            v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v
        ]
        assert claims == ["attnserve-models"]
    (job_container,) = job_spec["containers"]
    job_env = {e["name"]: e["value"] for e in job_container["env"]}
    job_mounts = {m["mountPath"] for m in job_container["volumeMounts"]}
    server_repo = base[("ConfigMap", "attnserve-config")]["data"]["ATTNSERVE_REPOSITORY"]
    assert job_env["ATTNSERVE_REPOSITORY"] in job_mounts and job_env["ATTNSERVE_REPOSITORY"] == server_repo
    assert job_container["command"] == ["attnserve-bootstrap-models"]


def test_images_are_tagged(
    base: dict[tuple[str, str], Resource], kserve: dict[tuple[str, str], Resource]
) -> None:
    for resource in [*base.values(), *kserve.values()]:
        for container in containers(resource):
            assert (
                container["image"].rsplit(":", 1)[-1] not in {"", "latest"} and ":" in container["image"]
            ), f"{resource['kind']}/{resource['metadata']['name']}: untagged image {container['image']}"


def test_pod_monitor_scrapes_the_metrics_port_as_job_attnserve(base: dict[tuple[str, str], Resource]) -> None:
    monitor = base[("PodMonitor", "attnserve")]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    deployment = base[("Deployment", "attnserve")]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert _matches(monitor["spec"]["selector"]["matchLabels"], pod_labels)
    endpoints = monitor["spec"]["podMetricsEndpoints"]
    assert endpoints and all(e["port"] in _port_names(deployment) for e in endpoints)
    # The alert rules and dashboard select job="attnserve": the jobLabel's value on the pods.
    assert pod_labels[monitor["spec"]["jobLabel"]] == "attnserve"


def test_prometheus_rule_carries_the_compose_alerts(base: dict[tuple[str, str], Resource]) -> None:
    rule = base[("PrometheusRule", "attnserve")]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    alerts = yaml.safe_load((REPO / "deploy/prometheus/alerts.yml").read_text())
    assert rule["spec"]["groups"] == alerts["groups"], (
        "deploy/k8s/base/prometheusrule.yaml drifted from alerts.yml"
    )


def _required(resource: Resource, *path: str) -> Any:
    node: Any = resource
    for key in path:
        assert isinstance(node, dict) and key in node, f"{resource['kind']}: missing {'.'.join(path)}"
        node = node[key]
    return node


def test_kserve_runtime_serves_v2_grpc(kserve: dict[tuple[str, str], Resource]) -> None:
    runtime = kserve[("ServingRuntime", "attnserve")]
    assert runtime["apiVersion"] == "serving.kserve.io/v1alpha1"
    assert "grpc-v2" in _required(runtime, "spec", "protocolVersions")
    formats = _required(runtime, "spec", "supportedModelFormats")
    assert all("name" in f for f in formats)
    (container,) = _required(runtime, "spec", "containers")
    assert container["name"] == "kserve-container" and container["image"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert set(ports) == {"h2c"}, "KServe routes gRPC to the single port named h2c"
    args = dict(a.removeprefix("--").split("=", 1) for a in container["args"])
    assert int(args["port"]) == ports["h2c"]
    assert args["repository"] == "/mnt/models", "KServe's storage initializer places models at /mnt/models"
    assert container["readinessProbe"]["grpc"]["port"] == ports["h2c"]
    annotations = runtime["spec"]["annotations"]
    assert annotations["prometheus.kserve.io/port"] == args["metrics-port"]


def test_kserve_http_runtime_serves_v2_rest(kserve: dict[tuple[str, str], Resource]) -> None:
    runtime = kserve[("ServingRuntime", "attnserve-http")]
    assert _required(runtime, "spec", "protocolVersions") == ["v2"]
    (container,) = _required(runtime, "spec", "containers")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert set(ports) == {"http1"}, "KServe routes REST to the single port named http1"
    args = dict(a.removeprefix("--").split("=", 1) for a in container["args"])
    assert int(args["http-port"]) == ports["http1"] and args["repository"] == "/mnt/models"
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": ports["http1"]}
    assert not any(f["autoSelect"] for f in runtime["spec"]["supportedModelFormats"])


def test_inference_service_uses_the_runtime(kserve: dict[tuple[str, str], Resource]) -> None:
    (service,) = [r for (kind, _), r in kserve.items() if kind == "InferenceService"]
    assert service["apiVersion"] == "serving.kserve.io/v1beta1"
    model = _required(service, "spec", "predictor", "model")
    runtime = kserve[("ServingRuntime", model["runtime"])]
    assert model["modelFormat"] in [
        {k: f[k] for k in ("name", "version")} for f in runtime["spec"]["supportedModelFormats"]
    ]
    assert model["protocolVersion"] == "grpc-v2"
    assert _required(service, "spec", "predictor", "model", "storageUri").startswith(
        ("pvc://", "s3://", "gs://", "https://", "hdfs://", "oci://")
    )


def test_every_manifest_file_is_part_of_a_kustomization() -> None:
    listed: set[Path] = set()
    for name in KUSTOMIZATIONS:
        kustomization = yaml.safe_load((K8S / name / "kustomization.yaml").read_text())
        files = [K8S / name / entry for entry in kustomization["resources"]]
        listed.update(path.resolve() for path in files if not path.is_dir())
        listed.update((K8S / name / patch["path"]).resolve() for patch in kustomization.get("patches", []))
    present = {p.resolve() for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert present == listed, f"not applied by any kustomization: {sorted(map(str, present - listed))}"
