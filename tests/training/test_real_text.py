"""Users' data: its own recipe, max_len that covers the judged splits, a line per epoch, advice
that follows the loss curves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnserve.training.cli.main import main
from attnserve.training.loop.config import TrainConfig, planned_epochs
from attnserve.training.report.fit_diagnosis import OVERFIT, PLATEAU, UNDERTRAINED, advice, diagnose
from tests.training.sentences import write_sentences

EPOCH_LINE = "epoch {e}/2  step {s}  train loss "


def _files(tmp_path: Path, test_longer_by: int = 0) -> list[str]:
    train = write_sentences(tmp_path / "train.csv", 240, seed=0)
    val = write_sentences(tmp_path / "val.csv", 60, seed=1)
    test = write_sentences(tmp_path / "test.csv", 60, seed=2, longer_by=test_longer_by)
    return [
        "--data",
        str(train),
        "--val-data",
        str(val),
        "--test-data",
        str(test),
        "--text-column",
        "sentence",
    ]


def _train(tmp_path: Path, *flags: str) -> dict[str, object]:
    out = tmp_path / "run"
    common = ["--label-column", "label", "--epochs", "2", "--threads", "1", "--batch-size", "32"]
    assert main([*flags, *common, "--out", str(out)]) == 0
    metrics: dict[str, object] = json.loads((out / "metrics.json").read_text())
    return metrics


def test_own_data_trains_the_data_recipe_and_logs_one_line_per_epoch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = _train(tmp_path, *_files(tmp_path), "--d-model", "16")
    assert metrics["family"] == "gru_attention" and metrics["select_by"] == "loss"
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("epoch ")]
    # 240 rows at batch 32: 8 steps an epoch. Output is not a terminal under pytest: no bar, a line.
    assert len(lines) == 2, lines
    assert [line[: len(EPOCH_LINE.format(e=e, s=8 * e))] for e, line in zip((1, 2), lines, strict=True)] == [
        EPOCH_LINE.format(e=1, s=8),
        EPOCH_LINE.format(e=2, s=16),
    ]
    assert all("val accuracy" in line and "val loss" in line and line.endswith(" s") for line in lines)
    history = metrics["history"]
    assert isinstance(history, list) and [row["step"] for row in history] == [8, 16]


def test_auto_max_len_covers_the_test_texts_and_a_cap_that_cuts_them_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Training texts are 4-9 words; every test text is 12 words longer.
    files = _files(tmp_path, test_longer_by=12)
    metrics = _train(tmp_path, *files, "--model", "mean_pool", "--d-model", "8")
    data = metrics["data"]
    assert isinstance(data, dict)
    assert data["max_len"] == data["lengths"]["test"]["max"] > data["lengths"]["train"]["p95"]
    assert data["lengths"]["test"]["truncated"] == 0 and "cover the evaluated splits" in data["max_len_from"]

    capsys.readouterr()
    _train(tmp_path, *files, "--model", "mean_pool", "--d-model", "8", "--max-len", "12")
    cut = [line for line in capsys.readouterr().err.splitlines() if "test texts" in line]
    assert len(cut) == 1 and "cuts 60 test texts (100.0% of test" in cut[0], cut


def _row(epoch: int, train_loss: float, val_loss: float) -> dict[str, float]:
    return {"epoch": epoch, "train_loss": train_loss, "val_loss": val_loss}


def test_advice_follows_the_loss_curves() -> None:
    overfit = [_row(1, 0.5, 0.40), _row(2, 0.3, 0.42), _row(3, 0.2, 0.50)]
    assert diagnose(overfit)[0] == OVERFIT
    text = advice(overfit)
    assert "overfits" in text and "regularise" in text and "more steps make it worse" in text
    assert "--min-steps" not in text

    learning = [_row(1, 0.6, 0.55), _row(2, 0.5, 0.45), _row(3, 0.45, 0.40)]
    assert diagnose(learning)[0] == UNDERTRAINED and "--min-steps" in advice(learning)

    flat = [_row(1, 0.5, 0.40), _row(2, 0.45, 0.39), _row(3, 0.44, 0.395)]
    assert diagnose(flat)[0] == PLATEAU and "more data" in advice(flat)


def test_a_step_target_plans_the_epochs_the_schedule_ends_with() -> None:
    # SST-2's 67,349 phrases make 1,053 steps an epoch: 3000 steps are 3 epochs, not 25.
    assert planned_epochs(TrainConfig(target_steps=3000), 67_349) == 3
    assert planned_epochs(TrainConfig(), 67_349) == 25
    # A small set still reaches min_steps: 10 rows are 1 step an epoch.
    assert planned_epochs(TrainConfig(target_steps=300, min_steps=500), 10) == 500
    with pytest.raises(ValueError, match="target_steps must be >= 0"):
        TrainConfig(target_steps=-1)
