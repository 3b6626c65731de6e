"""`attnserve-train tune`: a TPE search on tiny sentences writes an ordinary best run, a table, a plot."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attnserve.training.cli.main import main
from attnserve.training.run.checkpoint import load_run
from tests.training.sentences import write_sentences


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tune")
    train = write_sentences(root / "train.csv", 160, seed=0)
    val = write_sentences(root / "val.csv", 40, seed=1)
    test = write_sentences(root / "test.csv", 40, seed=2)
    argv = ["tune", "--data", str(train), "--val-data", str(val), "--test-data", str(test)]
    argv += ["--text-column", "sentence", "--trials", "5", "--epochs", "3", "--threads", "1"]
    argv += ["--families", "mean_pool,conv_attention,bow_mlp", "--out", str(root / "search")]
    assert main(argv) == 0
    return root / "search"


def test_the_best_trial_is_an_ordinary_run_scored_on_validation_only(searched: Path) -> None:
    tuned = json.loads((searched / "best" / "tuned.json").read_text())
    run = load_run(searched / "best")
    assert run.family == tuned["family"] in ("mean_pool", "conv_attention", "bow_mlp")
    metrics = json.loads((searched / "best" / "metrics.json").read_text())
    assert metrics["val"]["accuracy"] == pytest.approx(tuned["value"])
    assert "test" not in metrics  # the search never reads the test part
    assert metrics["history"] and len(metrics["history"]) <= 3


def test_every_trial_is_in_the_table_and_the_plot_is_written(searched: Path) -> None:
    table = (searched / "trials.md").read_text().splitlines()
    rows = [line for line in table[2:] if line.startswith("| ")]
    assert len(rows) == 5
    numbers = [int(re.match(r"\| (\d+)", row).group(1)) for row in rows]  # type: ignore[union-attr]
    assert numbers == list(range(5))
    assert sum("(best)" in row for row in rows) == 1
    tuned = json.loads((searched / "best" / "tuned.json").read_text())
    best_row = next(row for row in rows if "(best)" in row)
    assert best_row.startswith(
        f"| {tuned['trial']} (best) | complete | {tuned['family']} | {tuned['value']:.4f}"
    )
    assert all(" complete " in row or " pruned " in row for row in rows)
    assert (searched / "trials.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tune_refuses_unknown_families_and_a_search_without_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tune", "--trials", "1", "--out", str(tmp_path)]) == 2
    assert "give --data" in capsys.readouterr().err
    data = write_sentences(tmp_path / "d.csv", 20, seed=0)
    argv = [
        "tune",
        "--data",
        str(data),
        "--text-column",
        "sentence",
        "--families",
        "lstm",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 2
    assert "unknown families ['lstm']" in capsys.readouterr().err
