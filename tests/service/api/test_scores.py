"""Scores as a model means them, on every front end: a tiny multi-label BERT and a tiny
regression BERT made with transformers in the test, imported with `attnserve-export FOLDER`,
served on 127.0.0.1 and asked over attnserve.v1 (the client), the JSON API, V2 gRPC and V2
REST. The oracle is transformers itself: a sigmoid per label of its logits (with the
bundle's thresholds deciding the assigned labels) and the raw value of a regression head.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers

from attnserve.export.cli import main as export_main
from attnserve.service.bundle import MANIFEST_FILE, STAGING_PREFIX
from attnserve.service.client import Client, ClientError
from attnserve.service.proto.inference import grpc_service_pb2 as pb
from tests.export.hf_classifiers import texts
from tests.support import http
from tests.support.problem_models import problem_folder
from tests.support.servers import RunningServer, free_port, make_settings
from tests.support.v2 import V2Calls, ids_request, output, text_request
from tests.support.waits import eventually

TAGS, SCORE = "tags", "score"
LABELS = ("sports", "arts", "news")
TEXTS = [*texts(6, seed=3), "the film was good and the music was great!"]
ATOL = 1e-4  # the head is 2000x scaled: float32 sums of padded and unpadded rows differ by ~2e-5
Expected = dict[str, np.ndarray]  # per model, transformers' logits [k, C] of TEXTS


def _logits(folder: Path, items: list[str]) -> np.ndarray:
    """transformers' logits [k, C], each text on its own (no padding)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    rows = []
    with torch.inference_mode():
        for text in items:
            encoded = tokenizer(text, truncation=True, max_length=38, return_tensors="pt")
            rows.append(model(**encoded).logits[0].numpy())
    return np.stack(rows)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("scores")
    return {
        TAGS: problem_folder(root / "tags-hf", LABELS, "multi_label_classification", 4, TEXTS),
        SCORE: problem_folder(root / "score-hf", ("rating",), "regression", 5, TEXTS),
    }


@pytest.fixture(scope="module")
def expected(folders: dict[str, Path]) -> Expected:
    return {name: _logits(folder, TEXTS) for name, folder in folders.items()}


@pytest.fixture(scope="module")
def thresholds(expected: Expected) -> list[float]:
    """Per label, the middle of the widest gap between the texts' probabilities near their
    median: unequal thresholds that split the texts, each well away from every probability."""
    chosen = []
    for column in _sigmoid(expected[TAGS]).T:
        values = np.sort(column.astype(np.float64))
        middle = range(1, len(values) - 1)
        k = max(middle, key=lambda i: values[i + 1] - values[i])
        chosen.append(float((values[k] + values[k + 1]) / 2))
    return chosen


@pytest.fixture(scope="module")
def server(
    folders: dict[str, Path], thresholds: list[float], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    repository = tmp_path_factory.mktemp("scores-models")
    for name, folder in folders.items():
        code = export_main([str(folder), "--repository", str(repository), "--name", name, "--no-latency"])
        assert code == 0
    # Thresholds as --rows would choose them; written here to be unequal and known.
    manifest = repository / TAGS / "1" / MANIFEST_FILE
    data = json.loads(manifest.read_text())
    assert data["scoring"] == {
        "problem": "multi_label_classification",
        "thresholds": [0.5] * 3,
        "chosen": {"method": "default", "file": None, "rows": None, "sha256": None},
    }
    data["scoring"]["thresholds"] = thresholds
    manifest.write_text(json.dumps(data))
    with RunningServer(make_settings(repository, http_port=free_port())) as running:
        yield running


def _http_port(server: RunningServer) -> int:
    assert server.server is not None
    return server.server.http_port


def _sigmoid(logits: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-logits.astype(np.float64))), np.float32)


def _over(probabilities: np.ndarray, thresholds: list[float]) -> list[list[bool]]:
    return [[bool(p >= t) for p, t in zip(row, thresholds, strict=True)] for row in probabilities]


def _assigned(probabilities: np.ndarray, thresholds: list[float]) -> list[list[str]]:
    return [[LABELS[j] for j, on in enumerate(row) if on] for row in _over(probabilities, thresholds)]


def test_the_oracle_assigns_some_labels_and_not_others(expected: Expected, thresholds: list[float]) -> None:
    """The texts exercise the thresholds: some labels over, some under, not all alike, and
    every probability far from its threshold next to the tolerance."""
    probabilities = _sigmoid(expected[TAGS])
    chosen = np.array(_over(probabilities, thresholds))
    assert chosen.any() and not chosen.all()
    assert len({tuple(row) for row in chosen.tolist()}) > 1
    assert np.abs(probabilities - np.array(thresholds, np.float32)).min() > 100 * ATOL
    assert len(set(thresholds)) == len(thresholds)


def test_model_info_says_what_the_scores_mean(server: RunningServer, thresholds: list[float]) -> None:
    with Client(server.target, timeout=30) as client:
        info = {m.name: m for m in client.models()}
    assert info[TAGS].problem_type == "multi_label_classification"
    assert info[TAGS].thresholds == pytest.approx(thresholds)
    assert info[SCORE].problem_type == "regression" and info[SCORE].thresholds == []
    assert info[SCORE].labels == ["rating"]
    reply = http.call(_http_port(server), "GET", f"/v1/models/{TAGS}")
    assert reply.status == 200
    document = reply.json()
    assert document["problem_type"] == "multi_label_classification"
    assert document["thresholds"] == pytest.approx(thresholds)


def test_native_grpc_serves_a_sigmoid_per_label_and_the_labels_over_their_thresholds(
    server: RunningServer, expected: Expected, thresholds: list[float]
) -> None:
    want = _sigmoid(expected[TAGS])
    with Client(server.target, timeout=30) as client:
        results = client.classify(TEXTS, model=TAGS).results
    got = np.stack([r.probabilities for r in results])
    np.testing.assert_allclose(got, want, atol=ATOL)
    assert [r.assigned for r in results] == _assigned(got, thresholds)
    # The top label is the most probable one, whether or not it is over its threshold.
    assert [r.label for r in results] == [LABELS[int(i)] for i in want.argmax(axis=1)]
    assert all(r.value is None for r in results)


def test_native_grpc_serves_a_regression_value(
    server: RunningServer, expected: Expected, thresholds: list[float]
) -> None:
    with Client(server.target, timeout=30) as client:
        results = client.classify(TEXTS, model=SCORE).results
    values = np.array([r.value for r in results], np.float32)
    np.testing.assert_allclose(values, expected[SCORE][:, 0], atol=ATOL)
    assert all(r.probabilities.size == 0 and r.assigned == [] for r in results)
    np.testing.assert_allclose(np.stack([r.logits for r in results]), expected[SCORE], atol=ATOL)


def test_the_json_api_carries_assigned_and_value(
    server: RunningServer, expected: Expected, thresholds: list[float]
) -> None:
    port = _http_port(server)
    tags = http.classify(port, TAGS, {"texts": TEXTS})
    assert tags.status == 200, tags.body
    results = tags.json()["results"]
    got = np.array([r["probabilities"] for r in results], np.float32)
    np.testing.assert_allclose(got, _sigmoid(expected[TAGS]), atol=ATOL)
    assert [r["assigned"] for r in results] == _assigned(got, thresholds)
    assert all(r["value"] is None for r in results)
    score = http.classify(port, SCORE, {"texts": TEXTS})
    assert score.status == 200, score.body
    results = score.json()["results"]
    np.testing.assert_allclose([r["value"] for r in results], expected[SCORE][:, 0], atol=ATOL)
    assert all(r["probabilities"] == [] and r["assigned"] is None for r in results)


def test_v2_grpc_declares_and_returns_assigned_and_value(
    server: RunningServer, expected: Expected, thresholds: list[float]
) -> None:
    calls = V2Calls(server.target)
    try:
        metadata = calls.unary("ModelMetadata", pb.ModelMetadataRequest(name=TAGS), pb.ModelMetadataResponse)
        assert isinstance(metadata, pb.ModelMetadataResponse)
        declared = {t.name: (t.datatype, list(t.shape)) for t in metadata.outputs}
        assert declared["ASSIGNED"] == ("BOOL", [-1, 3])
        reply = calls.infer(text_request(TAGS, TEXTS))
        probabilities = output(reply, "PROBABILITIES")
        np.testing.assert_allclose(probabilities, _sigmoid(expected[TAGS]), atol=ATOL)
        assigned = output(reply, "ASSIGNED")
        assert assigned.tolist() == _over(probabilities, thresholds)

        metadata = calls.unary("ModelMetadata", pb.ModelMetadataRequest(name=SCORE), pb.ModelMetadataResponse)
        assert isinstance(metadata, pb.ModelMetadataResponse)
        names = [t.name for t in metadata.outputs]
        assert "VALUE" in names and "PROBABILITIES" not in names and "LABEL" not in names
        reply = calls.infer(text_request(SCORE, TEXTS))
        np.testing.assert_allclose(output(reply, "VALUE"), expected[SCORE], atol=ATOL)

        config = calls.unary("ModelConfig", pb.ModelConfigRequest(name=TAGS), pb.ModelConfigResponse)
        assert isinstance(config, pb.ModelConfigResponse)
        parameters = {k: v.string_value for k, v in config.config.parameters.items()}
        assert parameters["problem_type"] == "multi_label_classification"
        assert [float(t) for t in parameters["thresholds"].split(",")] == thresholds
    finally:
        calls.close()


def test_v2_rest_returns_assigned_as_booleans(
    server: RunningServer, expected: Expected, thresholds: list[float]
) -> None:
    port = _http_port(server)
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(TEXTS), 1], "data": TEXTS}],
            "outputs": [{"name": "PROBABILITIES"}, {"name": "ASSIGNED"}]}  # fmt: skip
    reply = http.call(port, "POST", f"/v2/models/{TAGS}/infer", body)
    assert reply.status == 200, reply.body
    outputs = {o["name"]: o for o in reply.json()["outputs"]}
    assert outputs["ASSIGNED"]["datatype"] == "BOOL" and outputs["ASSIGNED"]["shape"] == [len(TEXTS), 3]
    probabilities = np.array(outputs["PROBABILITIES"]["data"], np.float32).reshape(len(TEXTS), 3)
    assert outputs["ASSIGNED"]["data"] == [flag for row in _over(probabilities, thresholds) for flag in row]
    config = http.call(port, "GET", f"/v2/models/{SCORE}/config").json()
    assert config["parameters"] == {"problem_type": {"string_value": "regression"}}


def _attribution(server: RunningServer, model: str, text: str, label: str) -> Any:
    with Client(server.target, timeout=30) as client:
        return client.classify(text, model=model, attribution="shapley", attribution_label=label).results[0]


def test_an_attribution_explains_the_label_the_call_names(server: RunningServer) -> None:
    """Shapley scores add up to the named label's score on the text less its score with no
    words, whichever label is named; naming the text's own label changes nothing."""
    text = TEXTS[-1]
    own = _attribution(server, TAGS, text, "")
    assert own.attribution is not None
    same = _attribution(server, TAGS, text, own.label)
    np.testing.assert_allclose(same.attribution, own.attribution, atol=1e-6)
    other = next(label for label in LABELS if label != own.label)
    named = _attribution(server, TAGS, text, other)
    assert named.attribution is not None
    assert not np.allclose(named.attribution, own.attribution)
    # Efficiency: the sum moves by the difference of the two labels' scores on the text.
    j, k = LABELS.index(own.label), LABELS.index(other)
    assert float(own.attribution.sum() - named.attribution.sum()) != pytest.approx(0.0, abs=1e-6)
    for attribution, column in ((own.attribution, j), (named.attribution, k)):
        empty = _empty_score(server, TAGS, "PROBABILITIES", column)
        assert own.probabilities[column] - float(attribution.sum()) == pytest.approx(empty, abs=1e-4)


def _empty_score(server: RunningServer, model: str, name: str, column: int) -> float:
    """Output `name`'s column for the last text with every word gone, its special tokens kept
    ([CLS] [SEP]), as the attribution's empty coalition reads it; asked over V2 by ids."""
    with Client(server.target, timeout=30) as client:
        words = client.classify(TEXTS[-1], model=model).results[0]
    tokenizer = server.settings.repository / model / "1" / "tokenizer.json"
    vocab = json.loads(tokenizer.read_text())["model"]["vocab"]
    ids = [vocab[t] for t, special in zip(words.tokens, words.special, strict=True) if special]
    assert len(ids) == 2
    calls = V2Calls(server.target)
    try:
        reply = calls.infer(
            ids_request(model, np.array([ids]), np.ones((1, len(ids)), np.int64), outputs=[name])
        )
        return float(output(reply, name)[0, column])
    finally:
        calls.close()


def test_a_regression_attribution_explains_the_value(server: RunningServer) -> None:
    result = _attribution(server, SCORE, TEXTS[-1], "")
    assert result.attribution is not None and result.attribution.shape == (len(result.tokens),)
    assert result.value is not None
    empty = _empty_score(server, SCORE, "VALUE", 0)
    assert result.value - float(result.attribution.sum()) == pytest.approx(empty, abs=1e-4)


def test_a_label_the_model_lacks_is_refused_on_every_front_end(server: RunningServer) -> None:
    with Client(server.target, timeout=30) as client, pytest.raises(ClientError) as caught:
        client.classify("the film", model=TAGS, attribution="occlusion", attribution_label="weather")
    assert caught.value.code.name == "INVALID_ARGUMENT"
    assert "attribution_label: 'weather' is not a label of tags (sports, arts, news)" in caught.value.details
    reply = http.classify(_http_port(server), TAGS, {"texts": ["the film"], "attribution": "occlusion",
                                                     "attribution_label": "weather"})  # fmt: skip
    assert reply.status == 400 and "'weather' is not a label of tags" in reply.body.decode()
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": ["the film"]}],
            "parameters": {"attribution": "occlusion", "attribution_label": "weather"}}  # fmt: skip
    reply = http.call(_http_port(server), "POST", f"/v2/models/{TAGS}/infer", body)
    assert reply.status == 400
    assert "parameters.attribution_label: 'weather' is not a label of tags" in reply.json()["error"]


def test_a_reload_serves_new_thresholds_while_a_call_on_the_old_version_finishes(
    server: RunningServer, thresholds: list[float], tmp_path: Path
) -> None:
    """Version 2 (every threshold 0.01: every label assigned) is published while a shapley
    call on version 1 is in flight; that call answers with version 1's thresholds, the next
    ones with version 2's."""
    root = tmp_path / "models"
    shutil.copytree(server.settings.repository / TAGS, root / TAGS)
    with (
        RunningServer(make_settings(root, repository_poll_seconds=0.1)) as running,
        Client(running.target, timeout=60) as client,
        ThreadPoolExecutor(1) as pool,
    ):
        first = pool.submit(client.classify, TEXTS, model=TAGS, attribution="shapley", attribution_budget=70)
        staging = root / TAGS / f"{STAGING_PREFIX}2"
        shutil.copytree(root / TAGS / "1", staging)
        data = json.loads((staging / MANIFEST_FILE).read_text())
        data["version"], data["scoring"]["thresholds"] = 2, [0.01] * len(LABELS)
        (staging / MANIFEST_FILE).write_text(json.dumps(data))
        staging.rename(root / TAGS / "2")
        assert eventually(lambda: client.model(TAGS).version == 2, timeout=30)
        old = first.result(timeout=60)
        new = client.classify(TEXTS, model=TAGS)
    assert old.version == 1 and old.results[0].attribution is not None
    got = np.stack([r.probabilities for r in old.results])
    assert [r.assigned for r in old.results] == _assigned(got, thresholds)
    assert new.version == 2 and all(r.assigned == list(LABELS) for r in new.results)
