"""NVIDIA's tritonclient against a running attnserve; answers must equal the native API's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnserve.service.client import Classification, Client
from tests.support.servers import RunningServer
from tests.support.v2 import run_checks, tokenize

MODEL = "car"
TEXTS = [
    "the white car is on the left of the black car",
    "the red car is behind the blue car",
    "a green car",
]
CHECKS = Path(__file__).with_name("triton_client_checks.py")
OUTPUTS = ["LOGITS", "PROBABILITIES", "LABEL", "ATTENTION", "LENGTHS"]


@pytest.fixture(scope="module")
def report(server: RunningServer, tools_python: Path, model_repository: Path) -> dict[str, Any]:
    """Everything tritonclient saw, from one run of the checks script (starting it costs ~1 s)."""
    ids, mask = tokenize(model_repository / MODEL / "1" / "tokenizer.json", TEXTS)
    spec = {
        "target": server.target,
        "model": MODEL,
        "all_models": ["car", "pool", "bow"],
        "texts": TEXTS,
        "input_ids": ids.tolist(),
        "attention_mask": mask.tolist(),
    }
    return run_checks(tools_python, CHECKS, spec)


@pytest.fixture(scope="module")
def native(server: RunningServer) -> Classification:
    with Client(server.target, timeout=30) as client:
        return client.classify(TEXTS, model=MODEL, attention="pooled")


def assert_matches_native(outputs: dict[str, Any], native: Classification, texts: int = len(TEXTS)) -> None:
    results = native.results[:texts]
    np.testing.assert_allclose(outputs["LOGITS"], [r.logits for r in results], atol=1e-5)
    np.testing.assert_allclose(outputs["PROBABILITIES"], [r.probabilities for r in results], atol=1e-5)
    assert outputs["LABEL"] == [[r.label] for r in results]
    assert outputs["LENGTHS"] == [len(r.tokens) for r in results]
    attention = np.asarray(outputs["ATTENTION"], dtype=np.float32)  # [B, T, T], zero padded
    width = max(len(r.tokens) for r in results)
    assert attention.shape == (texts, width, width)
    for row, result in zip(attention, results, strict=True):
        n = len(result.tokens)
        assert result.attention is not None
        np.testing.assert_allclose(row[:n, :n], result.attention, atol=1e-5)
        assert not row[n:].any() and not row[:, n:].any()


def test_health_and_server_metadata(report: dict[str, Any]) -> None:
    assert report["live"] is True and report["ready"] is True
    assert report["model_ready"] is True and report["unknown_model_ready"] is False
    metadata = report["server_metadata"]
    assert metadata["name"] == "attnserve"
    assert "statistics" in metadata["extensions"] and "model_configuration" in metadata["extensions"]


def test_model_metadata_declares_the_tensor_contract(report: dict[str, Any]) -> None:
    car = report["metadata"]["car"]
    assert car["name"] == "car" and car["versions"] == ["1"] and car["platform"] == "onnxruntime_onnx"
    inputs = {t["name"]: (t["datatype"], [int(d) for d in t["shape"]]) for t in car["inputs"]}
    assert inputs == {
        "TEXT": ("BYTES", [-1, 1]),
        "INPUT_IDS": ("INT64", [-1, -1]),
        "ATTENTION_MASK": ("INT64", [-1, -1]),
    }
    outputs = {t["name"]: (t["datatype"], [int(d) for d in t["shape"]]) for t in car["outputs"]}
    assert outputs == {
        "LOGITS": ("FP32", [-1, 2]),
        "PROBABILITIES": ("FP32", [-1, 2]),
        "LABEL": ("BYTES", [-1, 1]),
        "ATTENTION": ("FP32", [-1, -1, -1]),  # an encoder: the last layer averaged over heads
        "LENGTHS": ("INT64", [-1]),
        "ATTRIBUTION": ("FP32", [-1, -1]),  # only when asked for (docs/v2.md, "Attributions")
        "ATTRIBUTION_ROWS": ("INT32", [-1]),
        "WINDOWS": ("FP32", [-1, -1, 3]),  # only for texts read as windows (docs/v2.md)
    }
    pool = {t["name"]: [int(d) for d in t["shape"]] for t in report["metadata"]["pool"]["outputs"]}
    assert pool["ATTENTION"] == [-1, -1]
    bow = [t["name"] for t in report["metadata"]["bow"]["outputs"]]
    assert "ATTENTION" not in bow and "LABEL" in bow


def test_model_config(report: dict[str, Any], server: RunningServer) -> None:
    config = report["config"]["config"]
    assert config["name"] == MODEL and config["platform"] == "onnxruntime_onnx"
    assert config["max_batch_size"] == server.settings.max_texts_per_request
    inputs_of = config["input"]
    inputs = {i["name"]: (i["data_type"], [int(d) for d in i["dims"]], i["optional"]) for i in inputs_of}
    assert inputs["TEXT"] == ("TYPE_STRING", [1], True)
    assert inputs["INPUT_IDS"] == ("TYPE_INT64", [-1], True)
    outputs = {o["name"]: (o["data_type"], [int(d) for d in o["dims"]]) for o in config["output"]}
    assert outputs["LABEL"] == ("TYPE_STRING", [1]) and outputs["LENGTHS"] == ("TYPE_INT64", [1])
    batching = config["dynamic_batching"]
    # proto3 JSON leaves out zero values (a zero delay flushes as soon as the model is free).
    delay = int(batching.get("max_queue_delay_microseconds", 0))
    assert delay == int(server.settings.max_delay_ms * 1000)
    assert [int(size) for size in batching["preferred_batch_size"]] == [server.settings.max_batch_size]


def test_repository_index_lists_every_model(report: dict[str, Any]) -> None:
    index = {(m["name"], m["version"], m["state"]) for m in report["repository_index"]["models"]}
    assert index == {("bow", "1", "READY"), ("car", "1", "READY"), ("pool", "1", "READY")}


def test_infer_with_text_equals_the_native_api(report: dict[str, Any], native: Classification) -> None:
    reply = report["infer_text"]
    assert reply["id"] == "text-1" and reply["model_version"] == "1"
    assert list(reply["outputs"]) == OUTPUTS
    assert_matches_native(reply["outputs"], native)


def test_infer_with_input_ids_equals_the_native_api(report: dict[str, Any], native: Classification) -> None:
    reply = report["infer_ids"]
    assert reply["id"] == "ids-1"
    assert_matches_native(reply["outputs"], native)


def test_only_requested_outputs_are_sent(report: dict[str, Any], native: Classification) -> None:
    outputs = report["infer_some_outputs"]["outputs"]
    assert list(outputs) == ["LABEL", "LENGTHS"]
    assert outputs["LABEL"] == [[r.label] for r in native.results]


def test_async_infer(report: dict[str, Any], native: Classification) -> None:
    reply = report["async_infer"]
    assert reply["error"] is None and reply["id"] == "async-1"
    assert_matches_native(reply["outputs"], native)


def test_streaming_answers_every_request_by_id(report: dict[str, Any], native: Classification) -> None:
    results = report["stream"]["results"]
    assert sorted(results) == [f"stream-{i}" for i in range(len(TEXTS))]
    for index, result in enumerate(native.results):
        outputs = results[f"stream-{index}"]["outputs"]
        np.testing.assert_allclose(outputs["LOGITS"], [result.logits], atol=1e-5)
        assert outputs["LABEL"] == [[result.label]]
    (error,) = report["stream"]["errors"]
    assert "NOT_FOUND" in error and "no-such-model" in error


def test_errors_reach_tritonclient_with_their_status(report: dict[str, Any]) -> None:
    errors = report["errors"]
    assert errors["unknown_model"]["status"] == "StatusCode.NOT_FOUND"
    assert errors["unknown_output"]["status"] == "StatusCode.INVALID_ARGUMENT"
    assert "output NOPE" in errors["unknown_output"]["message"]
    assert errors["unimplemented"]["status"] == "StatusCode.UNIMPLEMENTED"


def test_statistics_count_what_tritonclient_sent(report: dict[str, Any]) -> None:
    def stats(key: str) -> dict[str, Any]:
        (entry,) = report[key]["model_stats"]
        assert entry["name"] == MODEL and entry["version"] == "1"
        return dict(entry)

    before, after = stats("stats_before"), stats("stats_after")

    def delta(*path: str) -> int:
        def get(entry: dict[str, Any]) -> int:
            value: Any = entry
            for key in path:
                value = value.get(key, {})
            return int(value or 0)

        return get(after) - get(before)

    # Successful inference calls: infer text, infer ids, some outputs, async, 3 streamed.
    calls, texts = 7, 4 * len(TEXTS) + len(TEXTS)
    assert delta("inference_stats", "success", "count") == calls
    assert delta("inference_count") == texts
    assert 1 <= delta("execution_count") <= calls
    for part in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert delta("inference_stats", part, "count") == calls
        assert delta("inference_stats", part, "ns") > 0
    # The unknown output failed on this model; the unknown model has no statistics to count in.
    assert delta("inference_stats", "fail", "count") == 1
    assert int(after["last_inference"]) > 0
    assert {entry["name"] for entry in report["stats_all"]["model_stats"]} == {"bow", "car", "pool"}
