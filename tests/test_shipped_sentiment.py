"""The SST-2 model shipped in models/sst2-sentiment (version 2, served by `make serve` beside
car-order; version 1 is the same graph without a temperature): it loads through the service
(golden cases checked at load), is a few MB, says how it was made, serves probabilities at its
calibrated temperature, and answers the README's sentences with the labels and probability the
README shows, with attributions."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from attnserve.service.bundle import read_bundle
from tests.support.http import call
from tests.support.servers import RunningServer, free_port, make_settings
from tests.support.shipped import ROOT, SENTIMENT, SENTIMENT_VERSION, shipped_sentiment

FOLDER = ROOT / "models" / SENTIMENT
SERVED = FOLDER / str(SENTIMENT_VERSION)
README = (ROOT / "README.md").read_text()


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    repository = tmp_path_factory.mktemp("sentiment") / "models"
    shipped_sentiment(repository)
    with RunningServer(make_settings(repository, http_port=free_port())) as server:
        assert server.server is not None
        yield server.server.http_port


def _classify(port: int, texts: list[str], **fields: object) -> list[dict[str, Any]]:
    reply = call(port, "POST", f"/v1/models/{SENTIMENT}:classify", {"texts": texts, **fields})
    assert reply.status == 200, reply.body
    results: list[dict[str, Any]] = reply.json()["results"]
    return results


def readme_examples() -> list[tuple[str, str, str]]:
    """(sentence, label, probability) the README shows for the sentiment model: its client
    commands, each followed in the README by the label it answers and its probability."""
    shown = (
        r'classify "([^"]+)" --model sst2-sentiment[^\n]*\n(?:[^\n]*\n)*?[^\n]*answers `(\w+)` \((0\.\d\d)\)'
    )
    return re.findall(shown, README)


def test_the_bundle_is_small_and_its_provenance_names_command_seed_commit_and_graph() -> None:
    files = [path for path in SERVED.iterdir() if path.is_file()]
    assert sum(path.stat().st_size for path in files) < 8 * 1024 * 1024
    provenance = (FOLDER / "PROVENANCE.md").read_text()
    assert "attnserve-train distill" in provenance and "--seed 0" in provenance
    assert "attnserve-export calibrate models/sst2-sentiment/1" in provenance
    assert re.search(r"commit [0-9a-f]{40}", provenance)
    for version in ("1", "2"):  # the same graph: version 2 adds the temperature
        digest = hashlib.sha256((FOLDER / version / "model.onnx").read_bytes()).hexdigest()
        assert digest[:16] in provenance  # the page describes these very weights


def test_it_serves_and_reproduces_its_golden_cases(port: int) -> None:
    manifest = read_bundle(SERVED, expect_name=SENTIMENT, expect_version=SENTIMENT_VERSION).manifest
    assert manifest.family == "gru_attention" and len(manifest.golden) >= 2
    results = _classify(port, [case.text for case in manifest.golden])
    for case, result in zip(manifest.golden, results, strict=True):
        np.testing.assert_allclose(result["logits"], case.logits, atol=case.tolerance)


def test_it_serves_probabilities_at_the_temperature_fitted_on_dev(port: int) -> None:
    calibration = read_bundle(SERVED).manifest.calibration
    assert calibration is not None
    assert (calibration.file, calibration.rows, calibration.graph) == ("dev.csv", 872, "model.onnx")
    assert calibration.ece_after < 0.03 < calibration.ece_before  # docs/results/calibration.md
    validation = read_bundle(FOLDER / "1").manifest.training_metrics["val"]
    assert (
        isinstance(validation, dict) and calibration.accuracy == validation["accuracy"]
    )  # dev.csv was its split
    result = _classify(port, ["a gorgeous, witty, seductive movie."])[0]
    logits = np.asarray(result["logits"], dtype=np.float64) / calibration.temperature
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose(result["probabilities"], expected, atol=1e-6)


def test_the_readme_sentences_get_the_labels_it_shows_with_attributions(port: int) -> None:
    examples = readme_examples()
    assert examples, "the README shows no sentiment example"
    results = _classify(port, [text for text, _, _ in examples], attribution="occlusion", attention="pooled")
    for (text, label, probability), result in zip(examples, results, strict=True):
        assert result["label"] == label, text
        assert f"{max(result['probabilities']):.2f}" == probability, text
        assert len(result["attribution"]) == len(result["tokens"])


def test_the_words_that_carry_a_review_rank_first(port: int) -> None:
    # Three adjectives say the same: removing one changes nearly nothing (occlusion scores
    # ~1e-4), while Shapley values share the credit among them.
    result = _classify(port, ["a gorgeous, witty, seductive movie."], attribution="shapley")[0]
    tokens, scores = result["tokens"], result["attribution"]
    assert result["label"] == "positive"
    top = {tokens[i] for i in np.argsort(scores)[-3:]}
    assert top == {"gorgeous", "witty", "seductive"}, (tokens, scores)
    mixed = "the acting is superb, but the plot never quite comes together"
    for method in ("occlusion", "shapley"):
        result = _classify(port, [mixed], attribution=method)[0]
        tokens, scores = result["tokens"], result["attribution"]
        assert tokens[int(np.argmax(scores))] == "superb" and scores[tokens.index("never")] < 0, method
