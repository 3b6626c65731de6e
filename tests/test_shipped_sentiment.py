"""The SST-2 model shipped in models/sst2-sentiment/1 (served by `make serve` beside car-order):
it loads through the service (golden cases checked at load), is a few MB, says how it was made,
and answers the README's sentences with the labels the README shows, with attributions."""

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
from tests.support.shipped import ROOT, SENTIMENT, shipped_sentiment

FOLDER = ROOT / "models" / SENTIMENT
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


def readme_examples() -> list[tuple[str, str]]:
    """(sentence, label) the README shows for the sentiment model: its client commands, each
    followed in the README by the label it answers."""
    shown = r'classify "([^"]+)" --model sst2-sentiment[^\n]*\n(?:[^\n]*\n)*?[^\n]*answers `(\w+)`'
    return re.findall(shown, README)


def test_the_bundle_is_small_and_its_provenance_names_command_seed_commit_and_graph() -> None:
    files = [path for path in (FOLDER / "1").iterdir() if path.is_file()]
    assert sum(path.stat().st_size for path in files) < 8 * 1024 * 1024
    provenance = (FOLDER / "PROVENANCE.md").read_text()
    assert "attnserve-train distill" in provenance and "--seed 0" in provenance
    assert re.search(r"commit [0-9a-f]{40}", provenance)
    digest = hashlib.sha256((FOLDER / "1" / "model.onnx").read_bytes()).hexdigest()
    assert digest[:16] in provenance  # the page describes these very weights


def test_it_serves_and_reproduces_its_golden_cases(port: int) -> None:
    manifest = read_bundle(FOLDER / "1", expect_name=SENTIMENT, expect_version=1).manifest
    assert manifest.family == "gru_attention" and len(manifest.golden) >= 2
    results = _classify(port, [case.text for case in manifest.golden])
    for case, result in zip(manifest.golden, results, strict=True):
        np.testing.assert_allclose(result["logits"], case.logits, atol=case.tolerance)


def test_the_readme_sentences_get_the_labels_it_shows_with_attributions(port: int) -> None:
    examples = readme_examples()
    assert examples, "the README shows no sentiment example"
    results = _classify(port, [text for text, _ in examples], attribution="occlusion", attention="pooled")
    for (text, label), result in zip(examples, results, strict=True):
        assert result["label"] == label, text
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
