"""The naive baseline does the same work as attnserve: same labels and probabilities."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnserve.service.client import Client
from attnserve.service.common.vocabulary import AttentionMode
from bench.serving.systems.naive_server import naive
from tests.support.servers import RunningServer, make_settings

TEXTS = [
    "the white car is on the left of the black car",
    "the black car is parked on the left and the white car on the right",
    "a car",
    "seen from the street the white car is left of the black car " * 6,  # longer than max_len
]


def test_naive_server_answers_as_attnserve_does(bench_repository: Path) -> None:
    with (
        RunningServer(make_settings(bench_repository)) as served,
        naive(bench_repository / "car" / "1") as base,
        Client(served.target) as ours,
        Client(base.target) as theirs,
    ):
        expected = ours.classify(TEXTS, model="car", attention=AttentionMode.POOLED)
        got = theirs.classify(TEXTS, model="car", attention=AttentionMode.POOLED)
    for want, have in zip(expected.results, got.results, strict=True):
        assert have.label == want.label and have.tokens == want.tokens and have.truncated == want.truncated
        np.testing.assert_allclose(have.probabilities, want.probabilities, atol=1e-5)
        assert have.attention is not None and want.attention is not None
        np.testing.assert_allclose(have.attention, want.attention, atol=1e-5)
