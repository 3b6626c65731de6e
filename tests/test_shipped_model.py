"""The car-order bundle shipped in models/car-order/1 (what `make serve` serves on a fresh
clone): it loads through the service (which checks its golden cases at load), reproduces
those cases over gRPC, and classifies the README's sentences as the README says."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import numpy as np
import pytest

from attnserve.service.bundle import read_bundle
from attnserve.service.client import Client
from tests.support.servers import RunningServer, make_settings
from tests.support.shipped import NAME, ROOT, SHIPPED, shipped_repository

# Positive: the white car is on the left (training/data/car_order.py).
EXPECTED = {
    "the white car is on the left and the black car on the right": "positive",
    "to the left of the black car is the white car": "positive",
    "the black car is left of the white car": "negative",
    "the white car is left of the black car": "positive",
    "the black car is on the left of the white car": "negative",
}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    repository = shipped_repository(tmp_path_factory.mktemp("shipped"))
    with RunningServer(make_settings(repository)) as server, Client(server.target, timeout=30) as connected:
        yield connected


def readme_sentences() -> list[str]:
    """The sentences the README's quick start classifies or explains with car-order, in order."""
    readme = (ROOT / "README.md").read_text()
    found = [
        text
        for text, rest in re.findall(r'attnserve-client (?:classify|explain) "([^"]+)"([^\n]*)', readme)
        if "--model sst2-sentiment" not in rest  # tests/test_shipped_sentiment.py reads those
    ]
    found += [text for body in re.findall(r"-d '(\{.*?\})'", readme) for text in json.loads(body)["texts"]]
    return found


def test_the_shipped_bundle_is_served_and_reproduces_its_golden_cases(client: Client) -> None:
    manifest = read_bundle(SHIPPED / "1", expect_name=NAME, expect_version=1).manifest
    info = client.model(NAME)
    assert (info.version, info.family, info.attention_kind) == (1, "transformer", "layers")
    assert len(manifest.golden) >= 2
    for case in manifest.golden:
        result = client.classify(case.text, model=NAME).results[0]
        np.testing.assert_allclose(result.logits, case.logits, atol=case.tolerance)


def test_the_readme_sentences_get_the_labels_it_promises(client: Client) -> None:
    sentences = readme_sentences()
    assert sentences and set(sentences) <= set(EXPECTED), set(sentences) - set(EXPECTED)
    reply = client.classify(sentences)  # no model named: the server's only model answers
    assert [r.label for r in reply.results] == [EXPECTED[s] for s in sentences]
