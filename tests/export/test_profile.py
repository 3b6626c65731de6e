"""The bundle's data profile: measured at export on the run's validation texts, optional to read."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from attnserve.export.errors import ExportError
from attnserve.export.profile import training_figures
from attnserve.service.bundle import MANIFEST_FILE, read_bundle, read_manifest
from attnserve.service.bundle.profile import CONFIDENCE_BUCKETS, TOKEN_BUCKETS
from attnserve.training.text.tokenizer import UNK_ID, encode_batch, load_tokenizer


def test_export_records_the_validation_figures_and_trainings_own(
    exported_bundle: Callable[[str], Path], trained_run: Callable[[str], Path]
) -> None:
    bundle = read_bundle(exported_bundle("attention_pool"))
    profile = bundle.manifest.data_profile
    assert profile is not None
    rows = [
        json.loads(line) for line in (trained_run("attention_pool") / "eval.jsonl").read_text().splitlines()
    ]
    labels = bundle.manifest.labels
    texts = [row["text"] for row in rows]
    assert profile.texts == len(rows)
    truth = np.bincount([row["label"] for row in rows], minlength=len(labels)) / len(rows)
    assert profile.label_shares == pytest.approx(dict(zip(labels, truth.tolist(), strict=True)), abs=1e-6)
    assert sum(profile.predicted_label_shares.values()) == pytest.approx(1.0, abs=1e-5)
    # Tokens and [UNK] shares, recomputed here with the bundle's own tokenizer.
    encoded = encode_batch(load_tokenizer(bundle.tokenizer_path), texts, bundle.manifest.max_len)
    assert profile.tokens_mean == pytest.approx(float(encoded.lengths.mean()), abs=1e-3)
    assert profile.tokens.bounds == list(TOKEN_BUCKETS) and sum(profile.tokens.counts) == len(rows)
    unknown = (encoded.input_ids == UNK_ID).sum(axis=1) / np.maximum(encoded.lengths, 1)
    assert profile.unknown_ratio_mean == pytest.approx(float(unknown.mean()), abs=1e-5)
    assert profile.truncated_share == pytest.approx(float(np.mean(encoded.truncated)), abs=1e-6)
    assert profile.confidence.bounds == list(CONFIDENCE_BUCKETS)
    assert 1 / len(labels) <= profile.confidence_mean <= 1.0
    # Training's own figures of the training split, copied from metrics.json.
    data = json.loads((trained_run("attention_pool") / "metrics.json").read_text())["data"]
    assert profile.training is not None
    assert profile.training.texts == data["lengths"]["train"]["n"]
    assert profile.training.truncated_share == data["lengths"]["train"]["truncated_share"]
    assert profile.training.unknown_token_share == data["vocabulary"]["unk_token_share"]["train"]
    total = sum(data["train_classes"].values())
    assert profile.training.label_shares == pytest.approx(
        {name: count / total for name, count in data["train_classes"].items()}, abs=1e-6
    )


def test_a_bundle_without_a_profile_still_loads(
    exported_bundle: Callable[[str], Path], tmp_path: Path
) -> None:
    manifest = json.loads((exported_bundle("bow_mlp") / MANIFEST_FILE).read_text())
    assert manifest.pop("data_profile") is not None
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert read_manifest(tmp_path).data_profile is None


def test_training_figures_need_a_data_report_as_training_writes_it() -> None:
    assert training_figures({"test": {}}, ["a", "b"]) is None, "runs from before the data report"
    with pytest.raises(ExportError, match="not as training writes it"):
        training_figures({"data": {"lengths": {"train": {"n": "many"}}}}, ["a", "b"])
