"""/metrics over HTTP, parsed with prometheus_client's parser: every contracted family."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from attnserve.service.client import Client, ClientError
from tests.support.servers import RunningServer

FAMILIES = {
    "attnserve_request_duration_seconds": ("histogram", {"protocol", "transport", "model", "version"}),
    "attnserve_tokenize_duration_seconds": ("histogram", {"model", "version"}),
    "attnserve_queue_wait_seconds": ("histogram", {"model", "version"}),
    "attnserve_inference_duration_seconds": ("histogram", {"model", "version"}),
    "attnserve_batch_size": ("histogram", {"model", "version"}),
    "attnserve_batch_tokens": ("histogram", {"model", "version"}),
    "attnserve_padding_ratio": ("histogram", {"model", "version"}),
    "attnserve_requests": ("counter", {"protocol", "transport", "model", "code"}),
    "attnserve_texts": ("counter", {"model", "code"}),
    "attnserve_queue_depth": ("gauge", {"model"}),
    "attnserve_inflight_requests": ("gauge", {"protocol", "transport"}),
    "attnserve_model_info": ("gauge", {"model", "version", "family", "provider"}),
    "attnserve_model_intra_op_threads": ("gauge", {"model", "version"}),
    "attnserve_graph_batches": ("counter", {"model", "version", "graph"}),
    "attnserve_model_load_failures": ("counter", {"model"}),
    "attnserve_cpu_fallback": ("counter", set()),
    "attnserve_deadline_dropped": ("counter", {"model"}),
}


def test_every_family_is_exposed_with_its_labels(client: Client, server: RunningServer) -> None:
    client.classify(["the white car is on the left", "a black car"], model="car", attention="pooled")
    with pytest.raises(ClientError):
        client.classify("a white car", model="secret-model-name")
    text = server.metrics_text()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    for name, (kind, labels) in FAMILIES.items():
        assert name in families, f"{name} missing from /metrics"
        family = families[name]
        assert family.type == kind, name
        assert family.samples, f"{name} has no samples"
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == labels, (name, sample.labels)
    assert "secret-model-name" not in text, "unknown model names must never become label values"
    assert server.value("attnserve_requests_total", model="_unknown", code="NOT_FOUND") >= 1
    assert server.value("attnserve_texts_total", model="car", code="OK") >= 2
    info = server.samples("attnserve_model_info", model="car", version="1", family="transformer")
    assert info == [1.0]
    assert server.value("attnserve_cpu_fallback_total") == 0
    assert server.value("attnserve_model_load_failures_total") == 0
    for histogram in (
        "attnserve_tokenize_duration_seconds",
        "attnserve_queue_wait_seconds",
        "attnserve_inference_duration_seconds",
        "attnserve_batch_tokens",
    ):
        assert server.value(f"{histogram}_count", model="car") >= 1, histogram
    assert (
        server.value(
            "attnserve_request_duration_seconds_count", protocol="native", transport="grpc", model="car"
        )
        >= 1
    )
