from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from attnserve.training.cli.main import main as train_main
from attnserve.training.loop.trainer import Split, TrainConfig, fit, predict
from attnserve.training.models import build_model
from attnserve.training.report.metrics import brier_score, expected_calibration_error, macro_f1, score
from attnserve.training.run.checkpoint import load_run, save_checkpoint
from attnserve.training.text.tokenizer import build_tokenizer, save_tokenizer


def test_metrics_on_known_values() -> None:
    labels = np.array([0, 0, 1, 1])
    preds = np.array([0, 1, 1, 1])
    # class 0: tp=1 fp=0 fn=1 -> 2/3; class 1: tp=2 fp=1 fn=0 -> 4/5
    assert macro_f1(labels, preds, 2) == pytest.approx((2 / 3 + 4 / 5) / 2)
    probs = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0], [0.25, 0.75]])
    assert brier_score(labels, probs) == pytest.approx((0 + 0.5 + 0 + 0.125) / 4)
    perfect = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    assert expected_calibration_error(labels, perfect) == pytest.approx(0.0)
    s = score(labels, perfect, loss=0.1)
    assert (s.accuracy, s.macro_f1, s.n) == (1.0, 1.0, 4)
    with pytest.raises(ValueError):
        score(labels[:0], perfect[:0], loss=0.0)


def _toy_split(n: int, seed: int) -> Split:
    """Label = which of the marker tokens 5 / 6 the row contains, among random filler tokens."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(7, 20, size=(n, 8))
    labels = rng.integers(0, 2, size=n)
    ids[np.arange(n), rng.integers(0, 8, size=n)] = np.where(labels == 1, 5, 6)
    return Split(ids.astype(np.int32), np.full(n, 8), labels.astype(np.int64))


def test_short_training_run_lowers_the_loss_and_reloads_identically(tmp_path: Path) -> None:
    train, val = _toy_split(256, 0), _toy_split(64, 1)
    model = build_model("attention_pool", {"vocab_size": 20, "num_classes": 2, "max_len": 16})
    _, before = predict(model, val, torch.device("cpu"))
    history = fit(model, train, val, TrainConfig(epochs=6, batch_size=32, lr=5e-3, progress=False))
    _, after = predict(model, val, torch.device("cpu"))
    assert after < before * 0.9, (before, after)
    assert len(history.epochs) >= 1 and history.best_epoch >= 1

    save_tokenizer(build_tokenizer(["a b c"]), tmp_path / "tokenizer.json")
    save_checkpoint(tmp_path, model, labels=["no", "yes"], task="toy", metrics={})
    reloaded = load_run(tmp_path)
    ids = torch.from_numpy(val.input_ids).long()
    mask = torch.ones_like(ids)
    with torch.no_grad():
        assert torch.equal(model(ids, mask)[0], reloaded.model(ids, mask)[0])
    assert reloaded.labels == ["no", "yes"] and reloaded.max_len == 16


def test_cli_writes_a_self_describing_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    rc = train_main(
        [
            "--task",
            "greetings-food",
            "--model",
            "attention_pool",
            "--out",
            str(out),
            "--epochs",
            "4",
            "--no-progress",
            "--d-model",
            "16",
        ]
    )
    assert rc == 0
    for name in (
        "checkpoint.pt",
        "tokenizer.json",
        "metrics.json",
        "eval.jsonl",
        "curves.png",
        "attention.png",
    ):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0.0 <= metrics["test"]["accuracy"] <= 1.0
    assert metrics["family"] == "attention_pool" and len(metrics["history"]) >= 1

    run = load_run(out)  # a checkpoint rebuilds the model from the run directory alone
    assert run.family == "attention_pool" and run.config["d_model"] == 16
    again = load_run(out)
    ids = torch.randint(2, run.config["vocab_size"], (3, 7))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        a, _ = run.model(ids, mask)
        b, _ = again.model(ids, mask)
    assert torch.equal(a, b)


def test_load_run_refuses_an_incomplete_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"checkpoint\.pt"):
        load_run(tmp_path)
