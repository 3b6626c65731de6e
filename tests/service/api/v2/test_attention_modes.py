"""The V2 `attention_mode` parameter: a tiny BERT fine-tuned in the test, served on 127.0.0.1,
asked for every attention mode over V2 gRPC (our messages and NVIDIA's tritonclient) and V2
REST; each reply must hold the native API's weights for the same texts, zero-padded."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnserve.export.writer import export_run
from attnserve.service.bundle import read_bundle
from attnserve.service.client import Client, TextResult
from attnserve.service.proto.inference import grpc_service_pb2 as pb
from tests.support import http
from tests.support.fuzzing import call
from tests.support.servers import RunningServer, free_port, make_settings
from tests.support.tiny_bert import shared_tiny_encoder_run
from tests.support.v2 import SERVICE, V2Calls, output, run_checks, text_request

MODEL, POOL = "bert", "pool"
TEXTS = [
    "The plot was superb.",
    "The ending was terrible, and the music, well, it was dull!",
    "the cast was lovely",
]
MODES = ("pooled", "last_layer", "all", "rollout")
LAYERS = HEADS = 2  # the tiny BERT's
INFER = SERVICE + "ModelInfer"
CHECKS = Path(__file__).with_name("triton_attention_checks.py")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory, trained_run: Callable[[str], Path]) -> Path:
    """The tiny BERT as `bert` and a tiny attention-pooling model (kind "pool") as `pool`."""
    root = tmp_path_factory.mktemp("attention-modes")
    encoder_run = shared_tiny_encoder_run(tmp_path_factory)
    repository = root / "models"
    export_run(encoder_run, repository, MODEL)
    export_run(trained_run("attention_pool"), repository, POOL)
    return repository


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[RunningServer]:
    with RunningServer(make_settings(repository, http_port=free_port())) as running:
        yield running


@pytest.fixture(scope="module")
def native(server: RunningServer) -> dict[str, list[TextResult]]:
    """The native API's results for TEXTS in every mode."""
    with Client(server.target, timeout=30) as client:
        return {mode: client.classify(TEXTS, model=MODEL, attention=mode).results for mode in MODES}


@pytest.fixture(scope="module")
def v2(server: RunningServer) -> Iterator[V2Calls]:
    calls = V2Calls(server.target)
    yield calls
    calls.close()


def http_port(server: RunningServer) -> int:
    assert server.server is not None
    return server.server.http_port


def expected_shape(mode: str, width: int) -> tuple[int, ...]:
    inner = {"pooled": (), "rollout": (), "last_layer": (HEADS,), "all": (LAYERS, HEADS)}[mode]
    return (len(TEXTS), *inner, width, width)


def assert_matches_native(
    attention: np.ndarray, lengths: list[int], mode: str, results: list[TextResult]
) -> None:
    """`attention` is the native per-text weights in `mode`, zero-padded to the longest text."""
    assert lengths == [len(result.tokens) for result in results]
    assert attention.shape == expected_shape(mode, max(lengths))
    for row, n, result in zip(attention, lengths, results, strict=True):
        assert result.attention is not None
        np.testing.assert_allclose(row[..., :n, :n], result.attention, atol=1e-6)
        padding = np.ones(row.shape, dtype=bool)
        padding[..., :n, :n] = False
        assert not row[padding].any()


def grpc_request(
    texts: list[str], *, model: str = MODEL, output_mode: str | None = None, request_mode: str | None = None
) -> pb.ModelInferRequest:
    request = text_request(model, texts, outputs=["LENGTHS"])
    attention = request.outputs.add(name="ATTENTION")
    if output_mode is not None:
        attention.parameters["attention_mode"].string_param = output_mode
    if request_mode is not None:
        request.parameters["attention_mode"].string_param = request_mode
    return request


def rest_request(
    texts: list[str], *, output_mode: str | None = None, request_mode: object = None, binary: bool = False
) -> dict[str, Any]:
    parameters: dict[str, Any] = {"binary_data": binary}
    if output_mode is not None:
        parameters["attention_mode"] = output_mode
    document: dict[str, Any] = {
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts), 1], "data": texts}],
        "outputs": [{"name": "LENGTHS"}, {"name": "ATTENTION", "parameters": parameters}],
    }
    if request_mode is not None:
        document["parameters"] = {"attention_mode": request_mode}
    return document


def rest_infer(server: RunningServer, document: dict[str, Any], model: str = MODEL) -> http.Reply:
    return http.call(http_port(server), "POST", f"/v2/models/{model}/infer", document)


def rest_attention(reply: http.Reply) -> tuple[np.ndarray, list[int]]:
    """ATTENTION (JSON or binary) and LENGTHS (JSON) of a REST reply."""
    assert reply.status == 200, reply.body[:300]
    if "inference-header-content-length" in reply.headers:
        split = int(reply.headers["inference-header-content-length"])
        document, binary = json.loads(reply.body[:split]), reply.body[split:]
    else:
        document, binary = reply.json(), b""
    tensors = {tensor["name"]: tensor for tensor in document["outputs"]}
    attention = tensors["ATTENTION"]
    if "data" in attention:
        values = np.asarray(attention["data"], dtype=np.float32)
    else:
        values = np.frombuffer(binary[: attention["parameters"]["binary_data_size"]], dtype="<f4")
    return values.reshape(attention["shape"]), tensors["LENGTHS"]["data"]


@pytest.mark.parametrize("mode", MODES)
def test_grpc_output_parameter_picks_the_mode(
    v2: V2Calls, native: dict[str, list[TextResult]], mode: str
) -> None:
    reply = v2.infer(grpc_request(TEXTS, output_mode=mode))
    assert_matches_native(output(reply, "ATTENTION"), output(reply, "LENGTHS").tolist(), mode, native[mode])


def test_grpc_request_parameter_and_the_default(v2: V2Calls, native: dict[str, list[TextResult]]) -> None:
    by_request = v2.infer(grpc_request(TEXTS, request_mode="all"))
    lengths = output(by_request, "LENGTHS").tolist()
    assert_matches_native(output(by_request, "ATTENTION"), lengths, "all", native["all"])
    both = v2.infer(grpc_request(TEXTS, output_mode="rollout", request_mode="rollout"))
    assert_matches_native(output(both, "ATTENTION"), lengths, "rollout", native["rollout"])
    default = v2.infer(grpc_request(TEXTS))  # no parameter: today's pooled attention
    assert_matches_native(output(default, "ATTENTION"), lengths, "pooled", native["pooled"])
    every_output = v2.infer(text_request(MODEL, TEXTS))
    np.testing.assert_array_equal(output(every_output, "ATTENTION"), output(default, "ATTENTION"))


@pytest.mark.parametrize("mode", MODES)
def test_rest_output_parameter_picks_the_mode(
    server: RunningServer, native: dict[str, list[TextResult]], mode: str
) -> None:
    attention, lengths = rest_attention(rest_infer(server, rest_request(TEXTS, output_mode=mode)))
    assert_matches_native(attention, lengths, mode, native[mode])
    # binary tensor data and the request-level parameter give the same weights
    binary = rest_infer(server, rest_request(TEXTS, request_mode=mode, binary=True))
    np.testing.assert_array_equal(rest_attention(binary)[0], attention)


def test_rest_without_parameter_is_pooled(server: RunningServer, native: dict[str, list[TextResult]]) -> None:
    attention, lengths = rest_attention(rest_infer(server, rest_request(TEXTS)))
    assert_matches_native(attention, lengths, "pooled", native["pooled"])


BAD_GRPC: dict[str, Callable[[pb.ModelInferRequest], None]] = {
    "unknown on the output": lambda r: (
        r.outputs[1].parameters["attention_mode"].MergeFrom(pb.InferParameter(string_param="every_head"))
    ),
    "unknown on the request": lambda r: r.parameters["attention_mode"].MergeFrom(
        pb.InferParameter(string_param="every_layer")
    ),
    "not a string": lambda r: (
        r.outputs[1].parameters["attention_mode"].MergeFrom(pb.InferParameter(int64_param=4))
    ),
    "none is no mode": lambda r: r.parameters["attention_mode"].MergeFrom(
        pb.InferParameter(string_param="none")
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_GRPC))
def test_grpc_unknown_modes_are_invalid_argument_naming_the_modes(server: RunningServer, case: str) -> None:
    request = grpc_request(TEXTS[:1])
    BAD_GRPC[case](request)
    code, message = call(server.target, INFER, request.SerializeToString())
    assert code == "INVALID_ARGUMENT", (code, message)
    assert "attention_mode" in message and "pooled, last_layer, all, rollout" in message, message


def test_grpc_misplaced_and_conflicting_parameters_are_invalid_argument(server: RunningServer) -> None:
    on_logits = text_request(MODEL, TEXTS[:1])
    on_logits.outputs.add(name="LOGITS").parameters["attention_mode"].string_param = "all"
    conflicting = grpc_request(TEXTS[:1], output_mode="all", request_mode="rollout")
    without_attention = text_request(MODEL, TEXTS[:1], outputs=["LOGITS"])
    without_attention.parameters["attention_mode"].string_param = "all"
    for request, expected in (
        (on_logits, "output LOGITS: parameters.attention_mode applies to ATTENTION only"),
        (conflicting, "'all' differs from the request's 'rollout'"),
        (without_attention, "the request does not ask for it"),
    ):
        code, message = call(server.target, INFER, request.SerializeToString())
        assert (code, expected in message) == ("INVALID_ARGUMENT", True), message


def test_a_pooling_model_offers_pooled_only(v2: V2Calls, server: RunningServer) -> None:
    pooled = v2.infer(grpc_request(TEXTS, model=POOL, output_mode="pooled"))
    lengths = output(pooled, "LENGTHS").tolist()
    assert output(pooled, "ATTENTION").shape == (len(TEXTS), max(lengths))
    code, message = call(
        server.target, INFER, grpc_request(TEXTS, model=POOL, output_mode="rollout").SerializeToString()
    )
    assert code == "INVALID_ARGUMENT"
    assert "'rollout' is not available for model 'pool'" in message and "it offers: pooled" in message
    refused = rest_infer(server, rest_request(TEXTS, output_mode="last_layer"), model=POOL)
    assert refused.status == 400 and "it offers: pooled" in refused.json()["error"]


def test_rest_unknown_modes_are_400_naming_the_modes(server: RunningServer) -> None:
    for document, where in (
        (rest_request(TEXTS, output_mode="heads"), "outputs[1].parameters.attention_mode: 'heads'"),
        (rest_request(TEXTS, request_mode=3), "parameters.attention_mode: 3"),
    ):
        reply = rest_infer(server, document)
        assert reply.status == 400, reply.body[:300]
        message = reply.json()["error"]
        assert message.startswith(where) and "pooled, last_layer, all, rollout" in message, message


def test_the_reply_size_limit_applies_to_every_mode(repository: Path) -> None:
    max_len = read_bundle(repository / MODEL / "1").manifest.max_len
    long = [" ".join(["the plot was superb and the cast was lovely"] * max_len)] * 4  # max_len tokens each
    # Every layer and head (2 x 2 maps a text) is twice the limit, pooled half of it.
    limit = 4 * 2 * 4 * max_len * max_len
    settings = make_settings(repository, max_reply_bytes=limit, http_port=free_port())
    with RunningServer(settings) as running:
        code, message = call(running.target, INFER, grpc_request(long, output_mode="all").SerializeToString())
        assert code == "RESOURCE_EXHAUSTED" and "max_reply_bytes" in message, message
        assert call(
            running.target, INFER, grpc_request(long, request_mode="rollout").SerializeToString()
        ) == (
            "OK",
            "",
        )
        refused = rest_infer(running, rest_request(long, output_mode="all"))
        assert refused.status == 429 and "max_reply_bytes" in refused.json()["error"]


def test_tritonclient_picks_each_mode_by_request_parameter(
    server: RunningServer, tools_python: Path, native: dict[str, list[TextResult]]
) -> None:
    spec = {"target": server.target, "model": MODEL, "texts": TEXTS, "modes": list(MODES)}
    report = run_checks(tools_python, CHECKS, spec)
    for mode, reply in [("pooled", report["default"]), *report["modes"].items()]:
        attention = np.asarray(reply["ATTENTION"], dtype=np.float32)
        assert list(attention.shape) == reply["shape"]
        assert_matches_native(attention, reply["LENGTHS"], mode, native[mode])
    assert report["unknown_mode"]["status"] == "StatusCode.INVALID_ARGUMENT"
    assert "pooled, last_layer, all, rollout" in report["unknown_mode"]["message"]
