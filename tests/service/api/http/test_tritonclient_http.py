"""NVIDIA's tritonclient.http and perf_analyzer -i http against attnserve's HTTP port; the
answers must equal the native gRPC API's."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnserve.service.client import Classification, Client
from tests.service.api.v2.conftest import missing_tools
from tests.support.servers import RunningServer
from tests.support.v2 import run_checks, tokenize

MODEL = "car"
TEXTS = ["the white car is on the left of the black car", "the red car is behind the blue car", "a green car"]
CHECKS = Path(__file__).with_name("triton_http_checks.py")


@pytest.fixture(scope="module")
def http_tools(tools_python: Path) -> Path:
    probe = subprocess.run(
        [str(tools_python), "-c", "import tritonclient.http"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        missing_tools(f"tritonclient[http] does not import: {probe.stderr.strip()[-300:]}")
    return tools_python


@pytest.fixture(scope="module")
def report(port: int, http_tools: Path, model_repository: Path) -> dict[str, Any]:
    ids, mask = tokenize(model_repository / MODEL / "1" / "tokenizer.json", TEXTS)
    spec = {
        "url": f"127.0.0.1:{port}",
        "model": MODEL,
        "texts": TEXTS,
        "input_ids": ids.tolist(),
        "attention_mask": mask.tolist(),
    }
    return run_checks(http_tools, CHECKS, spec)


@pytest.fixture(scope="module")
def native(client: Client) -> Classification:
    return client.classify(TEXTS, model=MODEL, attention="pooled")


def test_health_metadata_and_config(report: dict[str, Any]) -> None:
    assert report["live"] and report["ready"] and report["model_ready"]
    assert report["unknown_model_ready"] is False
    assert "binary_tensor_data" in report["server_metadata"]["extensions"]
    assert [t["name"] for t in report["metadata"]["inputs"]] == ["TEXT", "INPUT_IDS", "ATTENTION_MASK"]
    assert report["config"]["max_batch_size"] > 0
    assert any(m["name"] == "car" and m["state"] == "READY" for m in report["repository_index"])


@pytest.mark.parametrize("call", ["infer_binary", "infer_gzip", "async_infer"])
def test_inference_equals_the_native_api(report: dict[str, Any], native: Classification, call: str) -> None:
    outputs = report[call]["outputs"]
    np.testing.assert_allclose(outputs["LOGITS"], [r.logits for r in native.results], atol=1e-6)
    np.testing.assert_allclose(outputs["PROBABILITIES"], [r.probabilities for r in native.results], atol=1e-6)
    assert outputs["LABEL"] == [[r.label] for r in native.results]
    assert outputs["LENGTHS"] == [len(r.tokens) for r in native.results]
    attention = np.asarray(outputs["ATTENTION"], dtype=np.float32)
    for row, result in zip(attention, native.results, strict=True):
        n = len(result.tokens)
        assert result.attention is not None
        np.testing.assert_allclose(row[:n, :n], result.attention, atol=1e-6)


def test_json_outputs_and_token_ids(report: dict[str, Any], native: Classification) -> None:
    assert report["infer_json"]["id"] == "json-1"
    assert list(report["infer_json"]["outputs"]) == ["LABEL", "LOGITS"]
    assert report["infer_json"]["outputs"]["LABEL"] == [[r.label] for r in native.results]
    assert report["infer_ids"]["outputs"]["LABEL"] == [[r.label] for r in native.results]


def test_errors_reach_tritonclient_as_messages(report: dict[str, Any]) -> None:
    errors = report["errors"]
    assert (
        errors["unknown_model"]["status"] == "404" and "no-such-model" in errors["unknown_model"]["message"]
    )
    assert errors["unknown_output"]["status"] == "400" and "NOPE" in errors["unknown_output"]["message"]
    assert errors["load"]["status"] == "501"
    before = report["stats_before"]["model_stats"][0]["inference_stats"]["success"]["count"]
    after = report["stats_after"]["model_stats"][0]["inference_stats"]["success"]["count"]
    assert after >= before + 5


@pytest.mark.parametrize("inputs", ["text", "ids"])
def test_perf_analyzer_over_http(
    port: int, server: RunningServer, perf_analyzer: Path, model_repository: Path, tmp_path: Path, inputs: str
) -> None:
    width = 16
    if inputs == "text":
        data: dict[str, object] = {"data": [{"TEXT": [text]} for text in TEXTS]}
        extra: list[str] = []
    else:
        ids, mask = tokenize(model_repository / MODEL / "1" / "tokenizer.json", TEXTS)

        def pad(row: np.ndarray) -> list[int]:
            padded: list[int] = row.tolist() + [0] * (width - len(row))
            return padded

        data = {
            "data": [{"INPUT_IDS": pad(i), "ATTENTION_MASK": pad(m)} for i, m in zip(ids, mask, strict=True)]
        }
        extra = ["--shape", f"INPUT_IDS:{width}", "--shape", f"ATTENTION_MASK:{width}"]
    (tmp_path / "data.json").write_text(json.dumps(data))
    report = tmp_path / "report.csv"
    command = [
        "bash", str(perf_analyzer), "-m", MODEL, "-u", f"127.0.0.1:{port}", "-i", "http",
        "--input-data", str(tmp_path / "data.json"), *extra,
        # Loose stability: two shared cores can stall a 500 ms window entirely.
        "--concurrency-range", "2", "--measurement-interval", "1000",
        "--stability-percentage", "999", "--max-trials", "10", "-f", str(report),
    ]  # fmt: skip
    before = server.value("attnserve_requests_total", protocol="v2", transport="http", model=MODEL, code="OK")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    with report.open(newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    assert float(row["Inferences/Second"]) > 0
    assert (
        server.value("attnserve_requests_total", protocol="v2", transport="http", model=MODEL, code="OK")
        > before
    )
    assert (
        server.value(
            "attnserve_requests_total", protocol="v2", transport="http", model=MODEL, code="INTERNAL"
        )
        == 0
    )
