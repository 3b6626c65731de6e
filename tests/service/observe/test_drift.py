"""Drift series scraped from a real prometheus_client registry (and its multiprocess mode)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from attnserve.service.bundle.profile import (
    CONFIDENCE_BUCKETS,
    TOKEN_BUCKETS,
    DataProfile,
    profile_texts,
    unknown_ratios,
)
from attnserve.service.bundle.profile import (
    Histogram as ProfileHistogram,
)
from attnserve.service.observe.drift import DriftMetrics, observe_many

LABELS = ("left", "right", "neither")
UNK = 1


def scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition text, keyed by (name, sorted labels)."""
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


def _batch() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Five texts: predicted labels 0, 0, 1, 2, 0; lengths 3, 5, 2, 8, 1; [UNK] in two of them."""
    probabilities = np.array(
        [[0.9, 0.05, 0.05], [0.55, 0.4, 0.05], [0.1, 0.85, 0.05], [0.2, 0.2, 0.6], [0.34, 0.33, 0.33]],
        dtype=np.float32,
    )
    ids = np.zeros((5, 8), dtype=np.int64)
    mask = np.zeros((5, 8), dtype=np.int64)
    rows = [[5, 1, 7], [4, 4, 1, 1, 9], [3, 3], [8] * 8, [1]]
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return probabilities, ids, mask


def _mv(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"model": "car", "version": "3", **labels}.items()))


def test_a_batch_becomes_label_counts_and_histograms_of_confidence_tokens_and_unknown_words() -> None:
    registry = CollectorRegistry()
    seen = DriftMetrics(registry).bind("car", 3, LABELS, unk_id=UNK)
    probabilities, ids, mask = _batch()
    seen.observe_batch(probabilities, ids, mask)
    seen.observe_batch(probabilities[2:3], ids[2:3, :2], mask[2:3, :2])  # a batch of one
    seen.observe_truncated([True, False, True])
    seen.observe_truncated([False, True])
    got = scrape(registry)
    assert got[("attnserve_predictions_total", _mv(label="left"))] == 3
    assert got[("attnserve_predictions_total", _mv(label="right"))] == 2
    assert got[("attnserve_predictions_total", _mv(label="neither"))] == 1
    assert got[("attnserve_truncated_texts_total", _mv())] == 3
    assert got[("attnserve_text_tokens_count", _mv())] == 6
    assert got[("attnserve_text_tokens_sum", _mv())] == 3 + 5 + 2 + 8 + 1 + 2
    assert got[("attnserve_text_tokens_bucket", _mv(le="2.0"))] == 3  # lengths 2, 1, 2
    assert got[("attnserve_text_tokens_bucket", _mv(le="4.0"))] == 4
    assert got[("attnserve_text_tokens_bucket", _mv(le="8.0"))] == 6
    # [UNK] shares per text: 1/3, 2/5, 0, 0, 1/1, 0
    assert got[("attnserve_text_unknown_ratio_sum", _mv())] == pytest.approx(1 / 3 + 2 / 5 + 1)
    assert got[("attnserve_text_unknown_ratio_bucket", _mv(le="0.0"))] == 3
    assert got[("attnserve_text_unknown_ratio_bucket", _mv(le="0.3"))] == 3
    assert got[("attnserve_text_unknown_ratio_bucket", _mv(le="0.5"))] == 5
    assert got[("attnserve_prediction_confidence_bucket", _mv(le="0.5"))] == 1  # 0.34
    assert got[("attnserve_prediction_confidence_bucket", _mv(le="0.9"))] == 6
    assert got[("attnserve_prediction_confidence_sum", _mv())] == pytest.approx(
        0.9 + 0.55 + 0.85 + 0.6 + 0.34 + 0.85, abs=1e-6
    )


@pytest.mark.parametrize("values", [[0.5], [0.0, 0.2, 0.2, 0.95, 1.0, 3.0], list(np.linspace(-1, 2, 301))])
def test_observe_many_matches_one_observe_per_value(values: list[float]) -> None:
    bulk, single = CollectorRegistry(), CollectorRegistry()
    buckets = CONFIDENCE_BUCKETS
    a = Histogram("h", "h", registry=bulk, buckets=buckets)
    b = Histogram("h", "h", registry=single, buckets=buckets)
    observe_many(a, np.asarray(values, dtype=np.float32))
    for v in np.asarray(values, dtype=np.float32).tolist():
        b.observe(v)
    got, expected = scrape(bulk), scrape(single)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-6), key


def _profile() -> DataProfile:
    probabilities, ids, mask = _batch()
    lengths = mask.sum(axis=1)
    return profile_texts(
        source="validation split",
        labels=LABELS,
        true_label_ids=np.array([0, 1, 1, 2, 0]),
        probabilities=probabilities,
        lengths=lengths,
        unknown_ratio=unknown_ratios(ids, lengths, UNK),
        truncated=np.array([False, False, False, True, False]),
    )


def test_the_bundles_training_figures_become_gauges_beside_the_live_series() -> None:
    registry = CollectorRegistry()
    profile = _profile()
    assert profile.predicted_label_shares == {"left": 0.6, "right": 0.2, "neither": 0.2}
    assert profile.label_shares == {"left": 0.4, "right": 0.4, "neither": 0.2}
    assert profile.tokens == ProfileHistogram.of([3, 5, 2, 8, 1], TOKEN_BUCKETS)
    assert profile.tokens.counts[:4] == [2, 1, 1, 1] and sum(profile.tokens.counts) == 5
    assert profile.truncated_share == 0.2 and profile.tokens_mean == 3.8
    DriftMetrics(registry).bind("car", 3, LABELS, unk_id=UNK, reference=profile)
    got = scrape(registry)
    assert got[("attnserve_training_label_share", _mv(label="left"))] == 0.6
    assert got[("attnserve_training_label_share", _mv(label="neither"))] == 0.2
    assert got[("attnserve_training_unknown_ratio_mean", _mv())] == pytest.approx(
        (1 / 3 + 2 / 5 + 1) / 5, abs=1e-6
    )
    assert got[("attnserve_training_truncated_ratio", _mv())] == 0.2
    assert got[("attnserve_training_text_tokens_mean", _mv())] == 3.8
    assert got[("attnserve_training_confidence_mean", _mv())] == pytest.approx(profile.confidence_mean)
    assert got[("attnserve_predictions_total", _mv(label="right"))] == 0, "labels show before traffic"


def test_unbinding_removes_the_series_once_the_last_binding_goes() -> None:
    registry = CollectorRegistry()
    drift = DriftMetrics(registry)
    old = drift.bind("car", 3, LABELS, unk_id=UNK, reference=_profile())
    new = drift.bind("car", 3, LABELS, unk_id=UNK, reference=_profile())  # a reload of the same version
    other = drift.bind("car", 4, LABELS, unk_id=None)
    probabilities, ids, mask = _batch()
    other.observe_batch(probabilities, ids, mask)
    old.unbind()
    assert ("attnserve_training_label_share", _mv(label="left")) in scrape(registry)
    new.unbind()
    names = {(name, dict(labels).get("version")) for name, labels in scrape(registry)}
    assert not [n for n in names if n[1] == "3"], names
    assert ("attnserve_predictions_total", "4") in names
    assert ("attnserve_text_unknown_ratio_count", "4") not in names or scrape(registry)[
        ("attnserve_text_unknown_ratio_count", tuple(sorted({"model": "car", "version": "4"}.items())))
    ] == 0, "without an [UNK] id no share is recorded"


# Two worker processes record batches into prometheus_client's multiprocess files; the
# supervisor's collector (observe/merged.py) must read the sums of both.
WORKER = textwrap.dedent(
    """
    import numpy as np
    from prometheus_client import CollectorRegistry
    from attnserve.service.observe.drift import DriftMetrics
    seen = DriftMetrics(CollectorRegistry()).bind("car", 3, ("a", "b"), unk_id=1)
    probabilities = np.array([[0.9, 0.1], [0.3, 0.7], [0.6, 0.4]], dtype=np.float32)
    ids = np.array([[5, 1, 0], [1, 1, 1], [4, 0, 0]], dtype=np.int64)
    seen.observe_batch(probabilities, ids, (ids > 0).astype(np.int64))
    seen.observe_truncated([True, True])
    """
)


def test_batches_recorded_by_several_workers_add_up(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for _ in range(2):
        run = subprocess.run(
            [sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=60
        )
        assert run.returncode == 0, run.stderr
    read = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from prometheus_client import CollectorRegistry, generate_latest; "
            "from attnserve.service.observe.merged import WorkerFiles; "
            "r = CollectorRegistry(); r.register(WorkerFiles(sys.argv[1])); "
            "sys.stdout.write(generate_latest(r).decode())",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert read.returncode == 0, read.stderr
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(read.stdout)
        for s in family.samples
    }
    assert got[("attnserve_predictions_total", _mv(label="a"))] == 4
    assert got[("attnserve_predictions_total", _mv(label="b"))] == 2
    assert got[("attnserve_truncated_texts_total", _mv())] == 4
    assert got[("attnserve_text_tokens_bucket", _mv(le="2.0"))] == 4  # lengths 2, 3, 1 twice
    assert got[("attnserve_text_unknown_ratio_sum", _mv())] == pytest.approx(2 * (0.5 + 1.0))
