"""The JSON API over a real HTTP port: every answer equals the gRPC reply for the same call."""

from __future__ import annotations

import socket
from dataclasses import fields

import numpy as np
import pytest

from attnserve.service.api.native.types import ClassifyReply, TextResult
from attnserve.service.client import Client
from tests.support.http import call, classify
from tests.support.servers import RunningServer

TEXTS = ["the white car is on the left of the black car", "the red car is behind the blue car"]
MODES = {"car": ["none", "pooled", "last_layer", "all", "rollout"], "pool": ["pooled"], "bow": ["none"]}


def test_models_are_listed_and_described_as_over_grpc(port: int, client: Client) -> None:
    listing = call(port, "GET", "/v1/models")
    assert listing.status == 200 and listing.headers["content-type"] == "application/json"
    models = {m["name"]: m for m in listing.json()["models"]}
    assert set(models) == {"car", "pool", "bow"}
    car = call(port, "GET", "/v1/models/car").json()
    info = client.model("car")
    assert car["labels"] == list(info.labels) and car["max_len"] == info.max_len
    assert car["attention"]["kind"] == "layers" and car["attention"]["layers"] == 2
    assert "ATTENTION_MODE_ALL" in car["attention"]["modes"]
    assert car == models["car"]
    assert call(port, "GET", "/v1/models/car?version=1").json()["version"] == 1


@pytest.mark.parametrize(("model", "mode"), [(m, mode) for m, modes in MODES.items() for mode in modes])
def test_classify_equals_the_grpc_reply(port: int, client: Client, model: str, mode: str) -> None:
    top_k = 0 if model == "bow" else 3
    reply = classify(port, model, {"texts": TEXTS, "attention": mode, "top_k": top_k, "request_id": "r-1"})
    assert reply.status == 200, reply.body
    body = reply.json()
    assert list(body) == [field.name for field in fields(ClassifyReply)]  # the plane's reply, as documented
    native = client.classify(TEXTS, model=model, attention=mode, top_k=top_k)
    assert (body["model"], body["version"], body["attention"], body["request_id"]) == (model, 1, mode, "r-1")
    assert body["labels"] == list(client.model(model).labels)
    for got, want in zip(body["results"], native.results, strict=True):
        assert list(got) == [field.name for field in fields(TextResult)]
        assert (got["label"], got["label_id"], got["tokens"], got["truncated"]) == (
            want.label,
            want.label_id,
            list(want.tokens),
            want.truncated,
        )
        np.testing.assert_array_equal(np.asarray(got["probabilities"], dtype=np.float32), want.probabilities)
        np.testing.assert_array_equal(np.asarray(got["logits"], dtype=np.float32), want.logits)
        if mode == "none":
            assert got["attention"] is None and want.attention is None
        else:
            np.testing.assert_array_equal(np.asarray(got["attention"], dtype=np.float32), want.attention)
        top = [(t["index"], t["token"]) for t in got["top_tokens"]]
        assert top == [(t.index, t.token) for t in want.top_tokens]
    timings = body["timings"]
    assert timings["total_us"] >= timings["inference_us"] > 0


def test_openapi_and_the_docs_page_describe_the_api(port: int) -> None:
    spec = call(port, "GET", "/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    assert {"/v1/models/{name}:classify", "/v2/models/{name}/infer", "/v2/health/ready"} <= set(spec["paths"])
    request_schema = spec["components"]["schemas"]["ClassifyRequest"]
    assert request_schema["properties"]["attention"]["enum"] == [
        "none",
        "pooled",
        "last_layer",
        "all",
        "rollout",
    ]
    page = call(port, "GET", "/docs")
    assert page.status == 200 and b"/static/docs.js" in page.body
    assert b"http://" not in page.body and b"https://" not in page.body  # nothing from a CDN
    assert call(port, "GET", "/static/docs.js").status == 200


def test_the_explorer_is_served_from_the_package_without_a_cdn(port: int) -> None:
    page = call(port, "GET", "/")
    assert page.status == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for asset in ("/static/render.js", "/static/explorer.js", "/static/explorer.css"):
        reply = call(port, "GET", asset)
        assert reply.status == 200 and b"https://" not in reply.body and b"http://" not in reply.body


def test_http_calls_are_counted_with_api_http(server: RunningServer, port: int) -> None:
    before = server.value(
        "attnserve_requests_total", protocol="native", transport="http", model="car", code="OK"
    )
    texts_before = server.value("attnserve_texts_total", model="car", code="OK")
    assert classify(port, "car", {"texts": TEXTS}).status == 200
    assert classify(port, "car", {"texts": TEXTS, "attention": "bogus"}).status == 400
    assert (
        server.value("attnserve_requests_total", protocol="native", transport="http", model="car", code="OK")
        == before + 1
    )
    assert (
        server.value("attnserve_requests_total", protocol="native", transport="http", code="INVALID_ARGUMENT")
        >= 1
    )
    assert server.value("attnserve_texts_total", model="car", code="OK") == texts_before + len(TEXTS)
    assert (
        server.value(
            "attnserve_request_duration_seconds_count", protocol="native", transport="http", model="car"
        )
        >= 1
    )


def test_a_timeout_header_or_parameter_sets_the_deadline(port: int) -> None:
    late = classify(port, "car", {"texts": TEXTS * 8}, headers={"timeout": "1us"})
    assert late.status == 400 and "timeout" in late.error["message"]
    for how in ({"headers": {"timeout": "0.000001"}}, {}):
        path = "/v1/models/car:classify" + ("" if how else "?timeout=0.000001s")
        reply = call(port, "POST", path, {"texts": TEXTS * 8}, **how)  # type: ignore[arg-type]
        assert reply.status == 504 and reply.error["code"] == "DEADLINE_EXCEEDED", reply.body
    assert classify(port, "car", {"texts": TEXTS}, headers={"timeout": "30s"}).status == 200


def test_accepted_connections_send_without_delay(server: RunningServer, port: int) -> None:
    """Replies go out in two writes (head, body): without TCP_NODELAY the body waits for the
    client's delayed ACK (measured: 48 ms per small reply instead of 1-2 ms)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(1024).startswith(b"HTTP/1.1 200")
        web = server.server._http._server  # type: ignore[union-attr]  # the uvicorn server
        assert web is not None
        accepted = [c.transport.get_extra_info("socket") for c in list(web.server_state.connections)]
        assert accepted
        assert all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in accepted)
