"""Request texts and caller-chosen names stay out of logs (at the default level) and out of
metric labels; metrics are served on their own port only."""

from __future__ import annotations

import http.client
import logging
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from attnserve.service.api.v2.tensors import encode_bytes
from attnserve.service.client import Client, ClientError
from tests.support.load import record_figures
from tests.support.servers import RunningServer, make_settings
from tests.support.v2 import V2Calls, text_request

MARKER = "confidential7f3a9"
ODD_NAMES = [f"{MARKER}-model", "../../etc/passwd", "bob's model", "🚗", "x" * 300, 'a"b{c}=d\n']


def test_texts_and_odd_names_never_reach_logs_or_metric_labels(
    model_repository: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)  # the server's default log level
    text = f"the white car {MARKER} is on the left"
    with RunningServer(make_settings(model_repository)) as server, Client(server.target) as client:
        assert client.classify([text], model="car", attention="pooled").results[0].label
        refused = 0
        refusals: tuple[Callable[[], object], ...] = (
            lambda: client.classify([text * 400], model="car"),  # too many characters
            lambda: client.classify([text] * 65, model="car"),  # too many texts
            lambda: client.classify([text], model="bow", attention="pooled"),  # no attention
            lambda: client.classify([text], model="car", version=9),
            *(lambda name=name: client.classify([text], model=name) for name in ODD_NAMES),
        )
        for call in refusals:
            with pytest.raises(ClientError):
                call()
            refused += 1
        v2 = V2Calls(server.target)
        try:
            assert v2.infer(text_request("car", [text]))
            for name in ODD_NAMES:
                with pytest.raises(grpc.RpcError):
                    v2.infer(text_request(name, [text]))
            bad = text_request("car", [text])
            bad.inputs[0].datatype = "FP32"
            bad.raw_input_contents[0] = encode_bytes([text.encode()])
            with pytest.raises(grpc.RpcError):
                v2.infer(bad)
        finally:
            v2.close()
        metrics = server.metrics_text()
        assert server.server is not None
        assert server.server.metrics_port != server.server.port
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
            urllib.request.urlopen(f"http://{server.target}/metrics", timeout=5)
    assert refused == 4 + len(ODD_NAMES)
    assert MARKER not in metrics
    for name in ODD_NAMES:
        assert name not in metrics
    models = {
        sample.labels["model"]
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if "model" in sample.labels
    }
    assert models == {"car", "pool", "bow", "_unknown"}
    logged = "\n".join(record.getMessage() + (record.exc_text or "") for record in caplog.records)
    assert caplog.records and MARKER not in logged
    record_figures(
        "request text and odd model names vs logs and metrics",
        calls=2 + refused + len(ODD_NAMES) + 1,
        marker_in_metrics=metrics.count(MARKER),
        marker_in_logs=logged.count(MARKER),
        log_records=len(caplog.records),
        model_label_values=sorted(models),
    )
