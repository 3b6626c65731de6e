"""docker-compose.yml: valid for Compose, scalable, wired to the images, and documented."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

import pytest
import yaml

from tests.deploy.compose import (
    COMPOSE_FILE,
    environment,
    load_compose,
    parse_duration,
    variables_with_defaults,
    volume_mounts,
)
from tests.deploy.conftest import REPO, require_tool

SERVICES = {"trainer", "server", "prometheus", "grafana", "loadtest", "otel-collector", "jaeger"}
PROFILES = {"loadtest": ["load"], "otel-collector": ["tracing"], "jaeger": ["tracing"]}
LONG_RUNNING = {"server", "prometheus", "grafana"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = compose["services"]
    return found


def _clean_env() -> dict[str, str]:
    """The caller's environment without variables the compose file reads, so defaults are tested."""
    names = set(variables_with_defaults(COMPOSE_FILE.read_text()))
    return {k: v for k, v in os.environ.items() if k not in names}


@pytest.mark.parametrize(
    "profile", [None, "load", "tracing"], ids=["default", "profile-load", "profile-tracing"]
)
def test_docker_compose_validates_the_file(profile: str | None) -> None:
    binary = require_tool("docker-compose", "apt-get install docker-compose")
    args = [binary, "--project-directory", str(REPO), "-f", str(COMPOSE_FILE)]
    if profile:
        args += ["--profile", profile]
    check = subprocess.run(
        [*args, "config", "-q"], capture_output=True, text=True, env=_clean_env(), timeout=60
    )
    assert check.returncode == 0, check.stderr


def test_only_the_load_test_and_tracing_sit_behind_profiles(services: dict[str, Any]) -> None:
    # Checked here: Compose 1.29's `config --services` lists profiled services too.
    assert set(services) == SERVICES
    assert {name: svc["profiles"] for name, svc in services.items() if "profiles" in svc} == PROFILES


def test_server_can_scale_out(services: dict[str, Any]) -> None:
    for name, svc in services.items():
        assert "container_name" not in svc, f"{name}: a fixed container name blocks --scale"
    env = environment(services["server"])
    served = {env["ATTNSERVE_PORT"], env["ATTNSERVE_HTTP_PORT"]}
    published = set()
    for entry in services["server"].get("ports", []):
        host_part, _, container = str(entry).rpartition(":")
        assert container in served, f"server publishes {entry}, not its gRPC or HTTP port"
        published.add(container)
        host_port = host_part.rpartition(":")[2]
        assert host_port == "" or re.fullmatch(r"\d+-\d+", host_port), (
            f"server publishes the fixed host port {entry!r}: a second replica could not bind it"
        )
    assert published == served


def test_ports_default_to_loopback(services: dict[str, Any]) -> None:
    for name, svc in services.items():
        for entry in svc.get("ports", []):
            assert str(entry).startswith("127.0.0.1:"), f"{name} publishes {entry} beyond loopback by default"


def test_every_image_is_fully_qualified(services: dict[str, Any]) -> None:
    # podman refuses short names such as prom/prometheus.
    for name, svc in services.items():
        registry = svc["image"].split("/")[0]
        assert "." in registry or registry == "localhost", f"{name}: {svc['image']} is a short name"
        for arg, value in svc.get("build", {}).get("args", {}).items():
            if arg.endswith("_IMAGE"):
                assert "." in value.split("/")[0], f"{name}: build arg {arg}={value} is a short name"


def test_builds_take_their_bases_and_torch_source_as_arguments(services: dict[str, Any]) -> None:
    for name in ("trainer", "server", "loadtest"):
        assert "PYTHON_IMAGE" in services[name]["build"]["args"], name
    train_args = services["trainer"]["build"]["args"]
    assert train_args["TORCH_INDEX_URL"].endswith("/whl/cpu")
    dockerfile_args = re.findall(r"^ARG (\w+)", (REPO / "deploy/Dockerfile.train").read_text(), re.MULTILINE)
    assert set(train_args) <= set(dockerfile_args)


def test_server_waits_for_the_trainer_and_shares_its_models(services: dict[str, Any]) -> None:
    trainer, server = services["trainer"], services["server"]
    assert server["depends_on"]["trainer"]["condition"] == "service_completed_successfully"
    assert trainer["restart"] == "no", "a one-shot trainer must not be restarted after it exits 0"
    trainer_repo = environment(trainer)["ATTNSERVE_REPOSITORY"]
    server_repo = environment(server)["ATTNSERVE_REPOSITORY"]
    trainer_volume = {target: source for source, target, _ in volume_mounts(trainer)}[trainer_repo]
    server_mounts = {target: (source, ro) for source, target, ro in volume_mounts(server)}
    assert server_mounts[server_repo] == (trainer_volume, True), (
        "the server reads the trainer's volume read-only"
    )


def test_server_drains_before_compose_kills_it(services: dict[str, Any]) -> None:
    server = services["server"]
    grace = float(environment(server)["ATTNSERVE_GRACE_SECONDS"])
    assert parse_duration(server["stop_grace_period"]) > grace
    assert server.get("stop_signal", "SIGTERM") == "SIGTERM"
    assert server["init"] is True, "an init process reaps --workers children and forwards SIGTERM"


def test_long_running_services_have_healthchecks_restart_and_limits(services: dict[str, Any]) -> None:
    for name in LONG_RUNNING:
        svc = services[name]
        assert svc["restart"] in {"unless-stopped", "always", "on-failure"}, name
        assert svc["healthcheck"]["test"][0] in {"CMD", "CMD-SHELL"}, name
    # The image's own check (deploy/healthcheck.sh): gRPC health over plaintext, TLS or mutual TLS.
    assert services["server"]["healthcheck"]["test"] == ["CMD", "attnserve-healthcheck"]
    for name, svc in services.items():
        assert float(svc["cpus"]) > 0, name
        assert re.fullmatch(r"\d+[kmg]", str(svc["mem_limit"])), f"{name}: mem_limit {svc.get('mem_limit')!r}"


def test_prometheus_scrapes_the_servers_metrics_port(services: dict[str, Any]) -> None:
    config = yaml.safe_load((REPO / "deploy/prometheus/prometheus.yml").read_text())
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "attnserve")
    (sd,) = job["dns_sd_configs"]
    metrics_port = environment(services["server"])["ATTNSERVE_METRICS_PORT"]
    assert sd["names"] == ["server"] and str(sd["port"]) == metrics_port
    assert metrics_port in [str(p) for p in services["server"]["expose"]]
    mounted = {source: target for source, target, _ in volume_mounts(services["prometheus"])}
    assert mounted["./deploy/prometheus"] == "/etc/prometheus"
    assert "--config.file=/etc/prometheus/prometheus.yml" in services["prometheus"]["command"]


def test_grafana_gets_its_provisioning_and_dashboards(services: dict[str, Any]) -> None:
    mounted = {source: target for source, target, _ in volume_mounts(services["grafana"])}
    assert mounted["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    provider = yaml.safe_load((REPO / "deploy/grafana/provisioning/dashboards/attnserve.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == mounted["./deploy/grafana/dashboards"]
    env = environment(services["grafana"])
    assert env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"].startswith(
        mounted["./deploy/grafana/dashboards"] + "/"
    )


def test_load_test_runs_headless_into_a_volume(services: dict[str, Any]) -> None:
    loadtest = services["loadtest"]
    command = loadtest["command"]
    assert command[:4] == ["locust", "-f", "loadtest/locustfile.py", "--headless"]
    assert loadtest["build"]["target"] == "loadtest"
    assert loadtest["depends_on"]["server"]["condition"] == "service_healthy"
    targets = [target for _, target, _ in volume_mounts(loadtest)]
    for flag in ("--csv", "--html"):
        report = command[command.index(flag) + 1]
        assert any(report.startswith(t + "/") for t in targets), f"{flag} {report} is not on a volume"
    assert "--run-time" in command, "the load test must be bounded in time"


def test_images_build_from_the_deploy_dockerfiles(services: dict[str, Any]) -> None:
    assert services["trainer"]["build"]["dockerfile"] == "deploy/Dockerfile.train"
    assert services["server"]["build"]["dockerfile"] == "deploy/Dockerfile.serve"
    assert services["server"]["build"]["target"] == "runtime"
    stages = re.findall(
        r"^FROM\s+\S+\s+AS\s+(\S+)", (REPO / "deploy/Dockerfile.serve").read_text(), re.MULTILINE
    )
    assert services["loadtest"]["build"]["target"] in stages


def test_every_variable_is_documented_with_its_default() -> None:
    docs = (REPO / "docs/deployment.md").read_text()
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^\|\s*`(\w+)`\s*\|\s*`([^`]*)`\s*\|", docs, re.MULTILINE)
    }
    variables = variables_with_defaults(COMPOSE_FILE.read_text())
    assert variables, "the compose file reads no variables"
    undocumented = sorted(set(variables) - set(rows))
    assert not undocumented, f"docs/deployment.md does not list {undocumented}"
    wrong = {name: (default, rows[name]) for name, default in variables.items() if rows[name] != default}
    assert not wrong, f"documented defaults differ from docker-compose.yml (compose, docs): {wrong}"
