"""A bundle with a temperature serves softmax(logits / T) on every front end, its logits raw;
a bundle whose manifest has no `calibration` serves softmax(logits), as before the field.

One exported bundle is served three times by a real server: as written with no `calibration`
key at all (an older bundle), and with temperatures 2.5 and 0.5 recorded in its manifest. The
same texts must give the same logits from all three; the probabilities differ exactly by T.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from attnserve.service.bundle import MANIFEST_FILE, Calibration, read_bundle, write_manifest
from attnserve.service.client import Client
from tests.support import http
from tests.support.servers import RunningServer, free_port, make_settings
from tests.support.v2 import V2Calls, output, text_request

TEXTS = ["hello there", "pizza with cheese", "good morning to you all", "bread"]
TEMPERATURES = {"old": None, "soft": 2.5, "sharp": 0.5}


def _softmax(logits: np.ndarray, temperature: float) -> np.ndarray:
    z = logits.astype(np.float64) / temperature
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return np.asarray(e / e.sum(axis=1, keepdims=True))


def _with_temperature(directory: Path, temperature: float) -> None:
    manifest = read_bundle(directory).manifest
    record = Calibration(
        temperature=temperature,
        graph="model.onnx",
        file="rows.jsonl",
        split="rows",
        rows=100,
        sha256="0" * 64,
        ece_before=0.1,
        ece_after=0.02,
        nll_before=0.5,
        nll_after=0.4,
        confidence_before=0.9,
        confidence_after=0.8,
        accuracy=0.8,
    )
    write_manifest(directory, manifest.model_copy(update={"calibration": record}))


@pytest.fixture(scope="module")
def server(
    exported_bundle: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("calibrated") / "models"
    source = exported_bundle("gru_attention")
    for name, temperature in TEMPERATURES.items():
        target = Path(shutil.copytree(source, root / name / "1"))
        raw = json.loads((target / MANIFEST_FILE).read_text())
        raw["name"] = name
        raw.pop("calibration", None)  # a bundle written before the field existed
        (target / MANIFEST_FILE).write_text(json.dumps(raw))
        if temperature is not None:
            _with_temperature(target, temperature)
    with RunningServer(make_settings(root, http_port=free_port())) as running:
        yield running


def test_probabilities_follow_the_temperature_and_logits_stay_raw(server: RunningServer) -> None:
    with Client(server.target, timeout=30) as client:
        replies = {name: client.classify(TEXTS, model=name).results for name in TEMPERATURES}
        info = {name: client.model(name) for name in TEMPERATURES}
    raw = np.stack([r.logits for r in replies["old"]])
    for name, temperature in TEMPERATURES.items():
        logits = np.stack([r.logits for r in replies[name]])
        probabilities = np.stack([r.probabilities for r in replies[name]])
        np.testing.assert_array_equal(logits, raw)  # the graph's own logits, whatever T
        expected = _softmax(logits, temperature or 1.0)
        np.testing.assert_allclose(probabilities, expected, atol=1e-6)
        assert [r.label for r in replies[name]] == [r.label for r in replies["old"]]
        assert info[name].metrics.get("calibration.temperature") == temperature
    # The temperatures move the confidences the way they must.
    tops = {name: np.stack([r.probabilities for r in replies[name]]).max(axis=1) for name in TEMPERATURES}
    assert (tops["soft"] <= tops["old"] + 1e-7).all() and (tops["sharp"] >= tops["old"] - 1e-7).all()
    assert not np.allclose(tops["soft"], tops["old"])


def test_json_and_v2_replies_carry_the_same_calibrated_probabilities(server: RunningServer) -> None:
    assert server.server is not None
    with Client(server.target, timeout=30) as client:
        native = np.stack([r.probabilities for r in client.classify(TEXTS, model="soft").results])
    reply = http.classify(server.server.http_port, "soft", {"texts": TEXTS})
    assert reply.status == 200, reply.body
    as_json = np.asarray([r["probabilities"] for r in reply.json()["results"]], dtype=np.float32)
    np.testing.assert_allclose(as_json, native, atol=1e-7)
    v2 = V2Calls(server.target)
    try:
        response = v2.infer(text_request("soft", TEXTS, outputs=["PROBABILITIES", "LOGITS"]))
    finally:
        v2.channel.close()
    np.testing.assert_allclose(output(response, "PROBABILITIES"), native, atol=1e-7)
    np.testing.assert_allclose(output(response, "PROBABILITIES"), _softmax(output(response, "LOGITS"), 2.5),
                               atol=1e-6)  # fmt: skip
