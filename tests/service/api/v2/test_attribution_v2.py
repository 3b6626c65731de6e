"""Attributions over V2 (gRPC and REST): the `attribution` and `attribution_budget` request
parameters and the ATTRIBUTION / ATTRIBUTION_ROWS outputs, against a real server serving the
shipped car-order bundle; with our own messages and with NVIDIA's tritonclient. The scores
equal the JSON API's for the same texts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from attnserve.service.proto.inference import grpc_service_pb2 as pb
from tests.support.http import call
from tests.support.http import classify as json_classify
from tests.support.servers import RunningServer
from tests.support.shipped import NAME, serving_shipped
from tests.support.v2 import V2Calls, output, run_checks, text_request

TEXTS = ["the white car is left of the black car", "a red car"]
CHECKS = Path(__file__).with_name("triton_attribution_checks.py")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with serving_shipped(tmp_path_factory.mktemp("shipped")) as running:
        yield running


@pytest.fixture(scope="module")
def port(server: RunningServer) -> int:
    assert server.server is not None
    return server.server.http_port


def json_api(port: int, method: str, budget: int = 0) -> list[dict[str, Any]]:
    document = {"texts": TEXTS, "attribution": method, "attribution_budget": budget}
    reply = json_classify(port, NAME, document)
    assert reply.status == 200, reply.body
    results: list[dict[str, Any]] = reply.json()["results"]
    return results


def assert_equals_json(attribution: Any, rows: Any, expected: list[dict[str, Any]]) -> None:
    """ATTRIBUTION [B, T] (zero padded) and ATTRIBUTION_ROWS [B] against the JSON API's results."""
    padded = np.asarray(attribution, dtype=np.float32)
    width = max(len(result["tokens"]) for result in expected)
    assert padded.shape == (len(expected), width)
    for row, result in zip(padded, expected, strict=True):
        n = len(result["tokens"])
        np.testing.assert_allclose(row[:n], result["attribution"], atol=1e-6)
        assert not row[n:].any()
    assert list(rows) == [result["attribution_rows"] for result in expected]


def with_parameters(request: pb.ModelInferRequest, **values: str | int) -> pb.ModelInferRequest:
    for name, value in values.items():
        if isinstance(value, str):
            request.parameters[name].string_param = value
        else:
            request.parameters[name].int64_param = value
    return request


def test_grpc_outputs_equal_the_json_api(v2: V2Calls, port: int) -> None:
    request = text_request(NAME, TEXTS, outputs=["LABEL", "ATTRIBUTION", "ATTRIBUTION_ROWS"])
    reply = v2.infer(with_parameters(request, attribution="occlusion"))
    assert [t.name for t in reply.outputs] == ["LABEL", "ATTRIBUTION", "ATTRIBUTION_ROWS"]
    assert [t.datatype for t in reply.outputs[1:]] == ["FP32", "INT32"]
    expected = json_api(port, "occlusion")
    assert_equals_json(output(reply, "ATTRIBUTION"), output(reply, "ATTRIBUTION_ROWS"), expected)

    shapley = with_parameters(text_request(NAME, TEXTS), attribution="shapley", attribution_budget=16)
    reply = v2.infer(shapley)  # no outputs named: every output, the attribution's among them
    assert "ATTRIBUTION" in [t.name for t in reply.outputs]
    expected = json_api(port, "shapley", 16)
    assert_equals_json(output(reply, "ATTRIBUTION"), output(reply, "ATTRIBUTION_ROWS"), expected)


def test_rest_outputs_equal_the_json_api(port: int) -> None:
    body = {
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(TEXTS), 1], "data": TEXTS}],
        "outputs": [{"name": "ATTRIBUTION"}, {"name": "ATTRIBUTION_ROWS"}],
        "parameters": {"attribution": "shapley", "attribution_budget": 16},
    }
    reply = call(port, "POST", f"/v2/models/{NAME}/infer", body)
    assert reply.status == 200, reply.body
    tensors = {t["name"]: t for t in reply.json()["outputs"]}
    assert tensors["ATTRIBUTION_ROWS"]["datatype"] == "INT32"
    shape = tensors["ATTRIBUTION"]["shape"]
    attribution = np.asarray(tensors["ATTRIBUTION"]["data"], dtype=np.float32).reshape(shape)
    assert_equals_json(attribution, tensors["ATTRIBUTION_ROWS"]["data"], json_api(port, "shapley", 16))


def test_no_attribution_outputs_unless_asked(v2: V2Calls) -> None:
    reply = v2.infer(text_request(NAME, TEXTS))
    names = [t.name for t in reply.outputs]
    assert "LABEL" in names and "ATTRIBUTION" not in names and "ATTRIBUTION_ROWS" not in names
    reply = v2.infer(with_parameters(text_request(NAME, TEXTS), attribution="none"))
    assert "ATTRIBUTION" not in [t.name for t in reply.outputs]


@pytest.mark.parametrize("parameters", [{}, {"attribution": "none"}], ids=["no method", "none"])
def test_outputs_named_without_a_method_come_back_empty(
    server: RunningServer, v2: V2Calls, parameters: dict[str, str]
) -> None:
    """As perf_analyzer asks: every declared output, no parameters; nothing is computed."""
    before = v2.statistics(NAME).inference_count
    request = text_request(NAME, TEXTS, outputs=["LABEL", "ATTRIBUTION", "ATTRIBUTION_ROWS"])
    reply = v2.infer(with_parameters(request, **parameters))
    assert output(reply, "ATTRIBUTION").shape == (len(TEXTS), 0)
    assert output(reply, "ATTRIBUTION_ROWS").tolist() == [0, 0]
    assert v2.statistics(NAME).inference_count == before + len(TEXTS)  # the texts' own rows only


@pytest.mark.parametrize(
    ("outputs", "parameters", "message"),
    [
        (
            ["ATTRIBUTION"],
            {"attribution": "nope"},
            "parameters.attribution: 'nope' is not an attribution method; use one of: none, occlusion",
        ),
        (["ATTRIBUTION"], {"attribution": 2}, "parameters.attribution: 2 is not a string"),
        (["LABEL"], {"attribution": "occlusion"}, "parameters.attribution: computes the ATTRIBUTION"),
        (["ATTRIBUTION"], {"attribution_budget": -1}, "parameters.attribution_budget: expected an integer"),
        (
            ["ATTRIBUTION"],
            {"attribution": "shapley", "attribution_budget": 600},
            "parameters.attribution_budget: 600 coalitions per text asked; this server runs at most 512 rows",
        ),
    ],
)
def test_bad_parameters_are_invalid_on_both_transports(
    v2: V2Calls, port: int, outputs: list[str], parameters: dict[str, str | int], message: str
) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        v2.infer(with_parameters(text_request(NAME, TEXTS, outputs=outputs), **parameters))
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert (raised.value.details() or "").startswith(message)
    body = {
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(TEXTS), 1], "data": TEXTS}],
        "outputs": [{"name": name} for name in outputs],
        "parameters": parameters,
    }
    reply = call(port, "POST", f"/v2/models/{NAME}/infer", body)
    assert reply.status == 400 and reply.json()["error"].startswith(message)


def test_a_bad_method_word_is_invalid_on_the_json_api(port: int) -> None:
    reply = json_classify(port, NAME, {"texts": TEXTS, "attribution": "nope"})
    assert reply.status == 400 and reply.error["code"] == "INVALID_ARGUMENT"
    assert "attribution" in reply.error["message"]


def test_tritonclient_reads_the_attribution(server: RunningServer, port: int, tools_python: Path) -> None:
    spec = {"target": server.target, "url": f"127.0.0.1:{port}", "model": NAME, "texts": TEXTS}
    report = run_checks(tools_python, CHECKS, spec)
    occlusion, shapley = json_api(port, "occlusion"), json_api(port, "shapley", 16)
    for transport in ("grpc", "http"):
        seen = report[transport]
        assert seen["metadata"]["ATTRIBUTION"] == ["FP32", [-1, -1]]
        assert seen["metadata"]["ATTRIBUTION_ROWS"] == ["INT32", [-1]]
        assert seen["config"]["ATTRIBUTION"] == "TYPE_FP32"
        assert seen["config"]["ATTRIBUTION_ROWS"] == "TYPE_INT32"
        named = seen["named"]
        assert list(named) == ["ATTRIBUTION", "ATTRIBUTION_ROWS"]
        assert_equals_json(named["ATTRIBUTION"], named["ATTRIBUTION_ROWS"], occlusion)
        assert seen["unasked"] == {"ATTRIBUTION": [[], []], "ATTRIBUTION_ROWS": [0, 0]}
        assert seen["shapley"]["names"][-2:] == ["ATTRIBUTION", "ATTRIBUTION_ROWS"]
        assert_equals_json(seen["shapley"]["ATTRIBUTION"], seen["shapley"]["ATTRIBUTION_ROWS"], shapley)
        assert "ATTRIBUTION" not in seen["plain"]["names"]
        bad = seen["bad_method"]
        assert "parameters.attribution: 'nope' is not an attribution method" in bad["message"], bad
