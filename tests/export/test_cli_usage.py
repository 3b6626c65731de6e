"""`attnserve-export` on requests it cannot serve: one line, exit 2; the truncation side travels."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from attnserve.export.cli import main
from attnserve.service.bundle import read_bundle
from attnserve.service.engine.models.tokenization import TextTokenizer
from attnserve.training.loop.trainer import TrainConfig
from attnserve.training.run.pipeline import DataSpec, train_run


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("attnserve-export: error: ")
    return err[0]


def test_bad_requests_exit_2_with_one_line(
    trained_run: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path / "no-run"), "--repository", str(tmp_path), "--name", "x"]) == 2
    assert "cannot load the training run" in _error_line(capsys)
    run = str(trained_run("mean_pool"))
    assert main([run, "--repository", str(tmp_path), "--name", "bad name", "--no-latency"]) == 2
    assert "model name 'bad name' must match" in _error_line(capsys)
    assert main([run, "--repository", str(tmp_path), "--name", "m", "--opset", "3", "--no-latency"]) == 2
    assert "opset 3 is not supported" in _error_line(capsys)


def _train(out: Path, truncation: str) -> Path:
    return train_run(
        out,
        "mean_pool",
        {"d_model": 8},
        TrainConfig(epochs=1, progress=False),
        DataSpec(task="greetings-food", n_pairs=40, max_len=4, truncation=truncation),
    ).run_dir


def test_head_and_tail_runs_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _train(tmp_path / "both", "head+tail")
    assert main([str(run), "--repository", str(tmp_path / "models"), "--name", "m", "--no-latency"]) == 2
    assert "--truncation head+tail" in _error_line(capsys)
    assert not (tmp_path / "models" / "m" / "1").exists()


def test_a_tail_run_is_served_the_tails_of_long_texts(tmp_path: Path) -> None:
    run = _train(tmp_path / "tail", "tail")
    assert main([str(run), "--repository", str(tmp_path / "models"), "--name", "m", "--no-latency"]) == 0
    bundle = read_bundle(tmp_path / "models" / "m" / "1")
    tokenizer = TextTokenizer(
        bundle.tokenizer_path, bundle.manifest.max_len, reject_long=False, max_text_chars=1000
    )
    encoded = tokenizer.encode(["hello there good morning to you all"])
    assert encoded.truncated == [True]
    assert encoded.tokens(0) == ["morning", "to", "you", "all"]
