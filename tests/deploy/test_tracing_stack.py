"""The compose `tracing` profile: the servers' OTLP settings, the collector's config and Jaeger
agree on hosts, ports and paths (the images cannot be run here; their configs are checked)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from attnserve.service.observe.settings import ObserveSettings
from attnserve.service.observe.tracing import TracingConfig
from tests.deploy.compose import environment, load_compose, volume_mounts
from tests.deploy.conftest import REPO

COLLECTOR_CONFIG = REPO / "deploy/otel/collector.yaml"


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    found: dict[str, Any] = load_compose()["services"]
    return found


@pytest.fixture(scope="module")
def collector() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COLLECTOR_CONFIG.read_text())
    return loaded


def _port(address: str) -> str:
    return address.rpartition(":")[2]


def test_the_servers_export_to_the_collectors_receiver(
    services: dict[str, Any], collector: dict[str, Any]
) -> None:
    env = environment(services["server"])
    assert env["ATTNSERVE_TRACING"] == "false", "tracing stays off unless asked for"
    endpoint = urlsplit(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
    assert endpoint.hostname == "otel-collector" and "otel-collector" in services
    protocols = collector["receivers"]["otlp"]["protocols"]
    wire = "grpc" if env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc" else "http"
    assert _port(protocols[wire]["endpoint"]) == str(endpoint.port)
    assert str(endpoint.port) in [str(p) for p in services["otel-collector"]["expose"]]
    # What the server makes of that environment: the same resolution the server runs.
    settings = ObserveSettings.model_validate({"tracing": True})
    config = TracingConfig.resolve(settings, env)
    assert config.protocol == env["OTEL_EXPORTER_OTLP_PROTOCOL"] and config.sample_ratio == 1.0
    assert config.endpoint is None, "the exporter reads OTEL_EXPORTER_OTLP_ENDPOINT itself"


def test_the_collector_reads_its_config_and_every_pipeline_part_is_defined(
    services: dict[str, Any], collector: dict[str, Any]
) -> None:
    svc = services["otel-collector"]
    mounts = {source: target for source, target, _ in volume_mounts(svc)}
    assert f"--config={mounts['./deploy/otel/collector.yaml']}" in svc["command"]
    for name, pipeline in collector["service"]["pipelines"].items():
        assert name == "traces"
        for kind in ("receivers", "processors", "exporters"):
            assert pipeline[kind], kind
            assert set(pipeline[kind]) <= set(collector[kind]), kind
    assert set(collector["service"]["extensions"]) <= set(collector["extensions"])
    # memory_limiter first, so data is refused before anything else holds it.
    assert collector["service"]["pipelines"]["traces"]["processors"][0] == "memory_limiter"


def test_the_collector_sends_to_jaeger_inside_the_network(
    services: dict[str, Any], collector: dict[str, Any]
) -> None:
    (exporter,) = collector["service"]["pipelines"]["traces"]["exporters"]
    host, _, port = collector["exporters"][exporter]["endpoint"].partition(":")
    assert host == "jaeger" and port in [str(p) for p in services["jaeger"]["expose"]]
    assert services["otel-collector"]["depends_on"]["jaeger"]["condition"] == "service_started"
    (ui,) = services["jaeger"]["ports"]
    assert str(ui).startswith("127.0.0.1:") and str(ui).endswith(":16686")
    for name in ("otel-collector", "jaeger"):
        assert services[name]["profiles"] == ["tracing"]
