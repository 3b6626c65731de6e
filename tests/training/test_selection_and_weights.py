"""The epoch budget in steps, class weights on imbalanced data, and which epoch is kept."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnserve.training.loop.config import class_weight_tensor, planned_epochs
from attnserve.training.loop.trainer import Split, TrainConfig, fit, predict
from attnserve.training.models import build_model
from attnserve.training.report.metrics import class_report
from attnserve.training.report.model_checks import prediction_warnings


def test_epoch_budget_reaches_the_minimum_number_of_steps() -> None:
    cfg = TrainConfig()
    assert planned_epochs(cfg, 240) == 250  # 4 steps an epoch: 1000 steps need 250 epochs
    assert planned_epochs(cfg, 2666) == 25  # car-order: 42 steps an epoch, 25 epochs are enough
    assert planned_epochs(TrainConfig(epochs=3), 240) == 3  # an explicit budget is kept
    assert planned_epochs(TrainConfig(min_steps=0), 240) == 25
    with pytest.raises(ValueError, match="select_by"):
        TrainConfig(select_by="f1")
    with pytest.raises(ValueError, match="class_weights"):
        TrainConfig(class_weights="inverse")


def _imbalanced(n: int, seed: int) -> Split:
    """5% positives; token 5 marks 60% of positives and 10% of negatives, among filler tokens.

    Unweighted, the best rule is "always negative" (a marked row is positive 24% of the time);
    with balanced class weights a marked row should be called positive.
    """
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < 0.05).astype(np.int64)
    ids = rng.integers(6, 30, size=(n, 6))
    marked = rng.random(n) < np.where(labels == 1, 0.6, 0.1)
    ids[marked, 0] = 5
    return Split(ids.astype(np.int32), np.full(n, ids.shape[1]), labels)


def _train(weights: str) -> tuple[dict[str, object], list[str]]:
    torch.manual_seed(0)
    model = build_model("mean_pool", {"vocab_size": 30, "num_classes": 2, "max_len": 8, "d_model": 8})
    train, val = _imbalanced(4000, 0), _imbalanced(1000, 1)
    cfg = TrainConfig(
        epochs=6, batch_size=128, lr=1e-2, word_dropout=0.0, progress=False, class_weights=weights
    )
    fit(model, train, val, cfg)
    probs, _ = predict(model, val, torch.device("cpu"))
    report = class_report(val.labels, probs, ("negative", "positive"))
    scores = {"ece": 0.0, "mean_confidence": 0.0, "accuracy": 0.0}  # calibration is not under test here
    return report, prediction_warnings("val", report, scores)


def test_balanced_class_weights_make_the_rare_class_predicted() -> None:
    weights = class_weight_tensor(TrainConfig(class_weights="balanced"), np.array([0, 0, 0, 1]), 3)
    assert weights is not None and weights.tolist() == pytest.approx([2 / 3, 2.0, 0.0])
    assert class_weight_tensor(TrainConfig(), np.array([0, 1]), 2) is None

    plain, plain_warnings = _train("none")
    assert plain["per_class"]["positive"]["predicted"] == 0  # type: ignore[index]
    assert any("predicts 'negative' for every val text" in w for w in plain_warnings)
    weighted, weighted_warnings = _train("balanced")
    positive = weighted["per_class"]["positive"]  # type: ignore[index]
    assert positive["recall"] > 0.4 and weighted["macro_f1"] > plain["macro_f1"]  # type: ignore[operator]
    assert weighted_warnings == []


@pytest.mark.parametrize("select_by", ["loss", "macro_f1", "accuracy"])
def test_the_kept_epoch_is_the_best_by_the_chosen_figure(select_by: str) -> None:
    torch.manual_seed(0)
    model = build_model("mean_pool", {"vocab_size": 30, "num_classes": 2, "max_len": 8, "d_model": 8})
    train, val = _imbalanced(1500, 2), _imbalanced(400, 3)
    cfg = TrainConfig(epochs=8, batch_size=64, lr=3e-2, progress=False, select_by=select_by, patience=100)
    history = fit(model, train, val, cfg)
    rows = history.epochs
    if select_by == "loss":
        best = min(rows, key=lambda r: r["val_loss"])
    else:
        best = max(rows, key=lambda r: (r[f"val_{select_by}"], -r["val_loss"]))
    assert history.best_epoch == best["epoch"]
    _, loss = predict(model, val, torch.device("cpu"))
    assert loss == pytest.approx(best["val_loss"], rel=1e-5)  # the kept weights are that epoch's
