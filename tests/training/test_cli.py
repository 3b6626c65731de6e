"""`attnserve-train` as a user meets it: --help, one-line errors, and runs on their own files."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from attnserve.training.cli.main import main

WORDS = {
    "1": ["awful", "rude", "cold", "bland"],
    "3": ["okay", "average", "fine", "decent"],
    "5": ["superb", "lovely", "perfect", "delicious"],
}
FILLER = ("we", "went", "there", "on", "a", "friday", "and", "the", "place", "had", "a", "table", "by",
          "the", "window", "for", "us")


def _star_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """Short reviews whose star rating (1, 3 or 5) shows in one word among filler words."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        stars = ("1", "3", "5")[i % 3]
        words = rng.sample(FILLER, 8)
        words.insert(rng.randrange(len(words)), rng.choice(WORDS[stars]))
        rows.append({"review": " ".join(words), "stars": int(stars)})
    return rows


def _csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("attnserve-train: error: ")
    return err[0]


def test_help_lists_every_familys_flags_with_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for needle in (
        "--max-len N|auto",
        "--truncation {head,tail,head+tail}",
        "--vocab-size",
        "--val-data",
        "--split",
        "--class-weights",
        "--select-by",
        "(default: macro_f1)",
        "--min-steps",
    ):
        assert needle in text, needle
    families = text.split("model flags, per family")[1]
    transformer = families.split("transformer:")[1].split("bow_mlp:")[0]
    assert "--n-layers" in transformer and "--n-heads" in transformer and "--positions" in transformer
    assert "learned | sinusoidal" in transformer
    mean_pool = families.split("mean_pool:")[1].split("attention_pool:")[0]
    assert "--positions" in mean_pool and " none " in mean_pool and "--n-layers" not in mean_pool


def test_user_errors_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "run")
    assert main(["--data", str(tmp_path / "missing.csv"), "--out", out]) == 2
    line = _one_error_line(capsys)
    assert "not found" in line and "missing.csv" in line

    data = _csv(tmp_path / "d.csv", _star_rows(30, 0))
    assert main(["--data", str(data), "--out", out]) == 2
    line = _one_error_line(capsys)
    assert "has no column 'text'; available columns: review, stars" in line

    assert main(["--task", "greetings-food", "--model", "mean_pool", "--n-layers", "2", "--out", out]) == 2
    assert "--n-layers is a flag of transformer, bow_mlp, not of mean_pool" in _one_error_line(capsys)
    assert main(["--task", "greetings-food", "--n-heads", "0", "--out", out]) == 2
    assert "n_heads" in _one_error_line(capsys)
    assert main(["--task", "greetings-food", "--select-by", "f1", "--out", out]) == 2
    assert "select_by must be one of" in _one_error_line(capsys)
    assert not Path(out, "checkpoint.pt").exists()


def test_stars_csv_trains_three_ordered_classes_with_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _csv(tmp_path / "stars.csv", _star_rows(300, 1))
    out = tmp_path / "run"
    args = ["--data", str(data), "--text-column", "review", "--label-column", "stars"]
    assert main([*args, "--model", "mean_pool", "--out", str(out), "--no-progress"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["labels"] == ["1", "3", "5"] and metrics["ordered_labels"] is True
    assert metrics["data"]["max_len_from"].startswith("auto") and metrics["data"]["max_len"] == 9
    assert metrics["data"]["lengths"]["train"]["truncated_share"] == 0.0
    assert metrics["data"]["vocabulary"]["word_types_in_train"] == len(FILLER) - 2 + 12  # "the", "a" twice
    # The default budget is 1000 steps, not 25 epochs of 4 steps: the model ends confident and right.
    assert metrics["epochs_run"] > 25 and metrics["test"]["accuracy"] >= 0.95
    assert metrics["val"]["loss"] < 0.3 and metrics["warnings"] == []
    assert "mae" in metrics["test"] and metrics["test"]["mae"] < 0.2
    report = json.loads((out / "report.json").read_text())
    assert set(report) == {"val", "test"} and report["test"]["labels"] == ["1", "3", "5"]
    assert sum(map(sum, report["test"]["confusion"])) == metrics["test"]["n"]
    assert (out / "confusion.png").stat().st_size > 1000
    printed = capsys.readouterr()
    assert "tokens per text (train)" in printed.err and "MAE" in printed.out

    # The old budget (25 epochs = 100 steps here) leaves the probabilities near chance: warned.
    short = tmp_path / "short"
    assert main([*args, "--model", "mean_pool", "--out", str(short), "--no-progress", "--epochs", "25"]) == 0
    warnings = json.loads((short / "metrics.json").read_text())["warnings"]
    assert any("poorly calibrated" in w for w in warnings), warnings
    assert "poorly calibrated" in capsys.readouterr().err


def test_data_seed_keeps_the_data_while_seed_changes_the_weights(tmp_path: Path) -> None:
    def train(name: str, *seeds: str) -> tuple[str, dict[str, Any], Any]:
        out = tmp_path / name
        args = ["--task", "greetings-food", "--model", "mean_pool", "--epochs", "1", "--no-progress"]
        assert main([*args, *seeds, "--out", str(out)]) == 0
        state = torch.load(out / "checkpoint.pt", weights_only=True)["state_dict"]
        return (out / "eval.jsonl").read_text(), json.loads((out / "metrics.json").read_text()), state

    val, metrics, weights = train("a", "--seed", "0")
    same_val, same_metrics, other_weights = train("b", "--seed", "1", "--data-seed", "0")
    other_val, _, _ = train("c", "--seed", "1")
    assert same_val == val and other_val != val  # the validation split follows --data-seed
    assert any(not torch.equal(weights[k], other_weights[k]) for k in weights)  # the weights follow --seed
    assert metrics["seeds"] == {"data": 0, "weights": 0}
    assert same_metrics["seeds"] == {"data": 0, "weights": 1}
