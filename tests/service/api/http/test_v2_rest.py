"""KServe V2 over HTTP/REST, with raw requests: JSON tensors, Triton's binary tensor
extension, metadata, config and statistics; every answer equals the gRPC V2 reply."""

from __future__ import annotations

import gzip
import json
import struct
from typing import Any

import numpy as np

from attnserve.service.api.v2.tensors import encode_bytes
from attnserve.service.proto.inference import grpc_service_pb2 as pb
from tests.support.http import Reply, call
from tests.support.servers import RunningServer
from tests.support.v2 import V2Calls, output, text_request

TEXTS = ["the white car is on the left of the black car", "a green car"]
OUTPUTS = ["LOGITS", "PROBABILITIES", "LABEL", "ATTENTION", "LENGTHS"]


def infer(
    port: int, body: bytes | dict[str, Any], headers: dict[str, str] | None = None, path: str = "car"
) -> Reply:
    return call(port, "POST", f"/v2/models/{path}/infer", body, headers)


def test_health_and_server_metadata(port: int) -> None:
    assert call(port, "GET", "/v2/health/live").status == 200
    assert call(port, "GET", "/v2/health/ready").status == 200
    assert call(port, "GET", "/v2/models/car/ready").status == 200
    assert call(port, "GET", "/v2/models/car/versions/1/ready").status == 200
    assert call(port, "GET", "/v2/models/car/versions/7/ready").status == 400
    assert call(port, "GET", "/v2/models/nope/ready").status == 400
    meta = call(port, "GET", "/v2").json()
    assert meta["name"] == "attnserve" and "binary_tensor_data" in meta["extensions"]


def test_model_metadata_config_and_index_match_grpc(port: int, server: RunningServer) -> None:
    v2 = V2Calls(server.target)
    try:
        grpc_meta = v2.unary("ModelMetadata", pb.ModelMetadataRequest(name="car"), pb.ModelMetadataResponse)
    finally:
        v2.close()
    assert isinstance(grpc_meta, pb.ModelMetadataResponse)
    meta = call(port, "GET", "/v2/models/car").json()
    assert meta == call(port, "GET", "/v2/models/car/versions/1").json()
    assert meta["versions"] == list(grpc_meta.versions) and meta["platform"] == grpc_meta.platform
    assert [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]] == [
        (t.name, t.datatype, list(t.shape)) for t in grpc_meta.inputs
    ]
    assert meta["outputs"][0]["shape"] == [-1, len(call(port, "GET", "/v1/models/car").json()["labels"])]
    config = call(port, "GET", "/v2/models/car/config").json()
    assert config["max_batch_size"] == server.settings.max_texts_per_request
    text = {"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1], "optional": True}
    assert text.items() <= config["input"][0].items()
    index = call(port, "POST", "/v2/repository/index", b"").json()
    assert {(m["name"], m["version"], m["state"]) for m in index} >= {
        ("car", "1", "READY"),
        ("bow", "1", "READY"),
    }


def test_json_inference_equals_grpc(port: int, server: RunningServer) -> None:
    document = {
        "id": "json-1",
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2, 1], "data": [[t] for t in TEXTS]}],
    }
    reply = infer(port, document)
    assert reply.status == 200 and reply.headers["content-type"] == "application/json", reply.body
    body = reply.json()
    assert (body["id"], body["model_name"], body["model_version"]) == ("json-1", "car", "1")
    v2 = V2Calls(server.target)
    try:
        grpc_reply = v2.infer(text_request("car", TEXTS))
    finally:
        v2.close()
    outputs = {o["name"]: o for o in body["outputs"]}
    assert list(outputs) == OUTPUTS
    for name in OUTPUTS:
        want = output(grpc_reply, name)
        assert outputs[name]["shape"] == list(want.shape)
        got = np.asarray(outputs[name]["data"], dtype=want.dtype).reshape(want.shape)
        if want.dtype == object:
            assert got.tolist() == want.tolist()
        else:
            np.testing.assert_array_equal(got, want)


def test_binary_tensor_extension_in_and_out(port: int) -> None:
    raw_text = encode_bytes([t.encode() for t in TEXTS])
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "TEXT",
                    "datatype": "BYTES",
                    "shape": [2, 1],
                    "parameters": {"binary_data_size": len(raw_text)},
                }
            ],
            "outputs": [
                {"name": "PROBABILITIES", "parameters": {"binary_data": True}},
                {"name": "LABEL", "parameters": {"binary_data": False}},
            ],
        }
    ).encode()
    reply = infer(port, header + raw_text, {"Inference-Header-Content-Length": str(len(header))})
    assert reply.status == 200, reply.body
    assert reply.headers["content-type"] == "application/octet-stream"
    split = int(reply.headers["inference-header-content-length"])
    body = json.loads(reply.body[:split])
    probabilities, label = body["outputs"]
    size = probabilities["parameters"]["binary_data_size"]
    assert size == len(reply.body) - split
    values = np.frombuffer(reply.body[split:], dtype="<f4").reshape(probabilities["shape"])
    assert values.nbytes == size
    np.testing.assert_allclose(values.sum(axis=1), 1.0, atol=1e-5)
    json_reply = infer(
        port, {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2, 1], "data": TEXTS}]}
    )
    by_json = {o["name"]: o["data"] for o in json_reply.json()["outputs"]}
    np.testing.assert_array_equal(values.ravel(), np.float32(by_json["PROBABILITIES"]))
    assert label["data"] == by_json["LABEL"]


def test_binary_output_for_every_output_and_int64_inputs(port: int) -> None:
    ids = np.array([[2, 5, 7, 0], [3, 4, 6, 8]], dtype="<i8")
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], dtype="<i8")
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT_IDS",
                    "datatype": "INT64",
                    "shape": [2, 4],
                    "parameters": {"binary_data_size": 64},
                },
                {"name": "ATTENTION_MASK", "datatype": "INT64", "shape": [2, 4], "data": mask.tolist()},
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    reply = infer(port, header + ids.tobytes(), {"Inference-Header-Content-Length": str(len(header))})
    assert reply.status == 200, reply.body
    split = int(reply.headers["inference-header-content-length"])
    outputs = json.loads(reply.body[:split])["outputs"]
    assert all("data" not in o and o["parameters"]["binary_data_size"] > 0 for o in outputs)
    assert sum(o["parameters"]["binary_data_size"] for o in outputs) == len(reply.body) - split
    lengths = next(o for o in outputs if o["name"] == "LENGTHS")
    offset = split + sum(o["parameters"]["binary_data_size"] for o in outputs[: outputs.index(lengths)])
    assert struct.unpack("<2q", reply.body[offset : offset + 16]) == (3, 4)


def test_gzip_request_body_and_versioned_path(port: int) -> None:
    document = json.dumps(
        {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": ["a red car"]}]}
    )
    reply = call(
        port,
        "POST",
        "/v2/models/car/versions/1/infer",
        gzip.compress(document.encode()),
        {"Content-Encoding": "gzip"},
    )
    assert reply.status == 200 and reply.json()["model_version"] == "1"


def test_statistics_count_rest_requests(port: int) -> None:
    def successes() -> int:
        stats = call(port, "GET", "/v2/models/car/stats").json()["model_stats"]
        count: int = stats[0]["inference_stats"]["success"]["count"]
        return count

    before = successes()
    assert (
        infer(
            port, {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": ["a car"]}]}
        ).status
        == 200
    )
    assert successes() == before + 1
    every = call(port, "GET", "/v2/models/stats").json()["model_stats"]
    assert {s["name"] for s in every} == {"car", "pool", "bow"}
    assert isinstance(every[0]["inference_count"], int)


def text_tensor(data: list[Any], shape: list[int], datatype: str = "BYTES") -> dict[str, Any]:
    return {"inputs": [{"name": "TEXT", "datatype": datatype, "shape": shape, "data": data}]}


def test_v2_errors_are_a_string_with_the_mapped_status(port: int) -> None:
    past_the_end = (
        b'{"inputs":[{"name":"TEXT","datatype":"BYTES","shape":[1,1],"parameters":{"binary_data_size":99}}]}'
    )
    cases = {
        "unknown model": (infer(port, text_tensor(["x"], [1, 1]), path="nope"), 404),
        "bad JSON": (infer(port, b"{nope"), 400),
        "no inputs": (infer(port, {"inputs": []}), 400),
        "wrong datatype": (infer(port, text_tensor([1.5], [1, 1], "FP32")), 400),
        "shape and data disagree": (infer(port, text_tensor(["x"], [2, 1])), 400),
        "unknown output": (infer(port, {**text_tensor(["x"], [1, 1]), "outputs": [{"name": "NOPE"}]}), 400),
        "binary size past the end": (
            infer(port, past_the_end + b"xx", {"Inference-Header-Content-Length": str(len(past_the_end))}),
            400,
        ),
        "load is not supported": (call(port, "POST", "/v2/repository/models/car/load"), 501),
        "unknown route": (call(port, "GET", "/v2/nothing/here"), 404),
    }
    for name, (reply, status) in cases.items():
        assert reply.status == status, (name, reply.status, reply.body)
        error = reply.json()["error"]
        assert isinstance(error, str) and error, name
