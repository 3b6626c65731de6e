"""`python -m bench ensemble` on toy runs trained here: each run's accuracy and their average's."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnserve.training.cli.main import main as train
from attnserve.training.data import load_task
from attnserve.training.run.checkpoint import load_run
from bench.cli import main as bench
from bench.training.ensemble import main, scores

# Three trainings build the fixture: about 10 s on a busy 2-core machine.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ensemble")
    args = ["--task", "greetings-food", "--model", "mean_pool", "--epochs", "3", "--no-progress"]
    seeds = {"a": ["--seed", "0"], "b": ["--seed", "1", "--data-seed", "0"], "other": ["--seed", "1"]}
    for name, flags in seeds.items():
        assert train([*args, *flags, "--out", str(root / name)]) == 0
    return {name: root / name for name in seeds}


def test_each_run_scores_what_training_measured(runs: dict[str, Path]) -> None:
    members = [load_run(runs["a"]), load_run(runs["b"])]
    dataset = load_task("greetings-food", seed=0)
    table = scores(members, {"test": dataset.test})
    trained = [run.metrics["test"]["accuracy"] for run in members]
    assert table["test"][:2] == pytest.approx(trained, abs=1e-6)


def test_the_average_of_one_run_with_itself_is_that_run(runs: dict[str, Path]) -> None:
    run = load_run(runs["a"])
    dataset = load_task("greetings-food", seed=0)
    alone, again, mean = scores([run, run], {"test": dataset.test, **dataset.extra})["test"]
    assert alone == again == mean


def test_a_table_row_per_split(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(runs["a"]), str(runs["b"])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| split | a | b | mean of probabilities |"
    assert lines[2].startswith("| test (")


def test_runs_of_other_data_are_refused(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert bench(["ensemble", str(runs["a"]), str(runs["other"])]) == 2
    assert "differ in task or data seed" in capsys.readouterr().err


def test_tiny_scores_the_first_texts_of_each_split(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench(["ensemble", "--tiny", str(runs["a"]), str(runs["b"])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("| test (")
    assert all(int(line.split("(")[1].split(")")[0]) <= 64 for line in lines[2:])
