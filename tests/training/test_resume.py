"""A time budget checked between steps, a loop state saved every epoch, and ``--resume``."""

from __future__ import annotations

import io
import json
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from attnserve.training.cli.main import main as train_main
from attnserve.training.loop.batching import Split
from attnserve.training.loop.resume import RESUME, ResumeError, fingerprint, read_state
from attnserve.training.loop.trainer import History, TrainConfig, fit
from attnserve.training.models import Classifier, build_model

# Dropout everywhere, word dropout and several batches an epoch: every random generator the
# loop uses takes part, so a resumed run only matches if all of them were restored.
MODEL = {"vocab_size": 20, "num_classes": 2, "max_len": 16, "n_layers": 1, "d_model": 16, "dropout": 0.1}
# One thread: a count chosen by timing could differ between the runs compared, and with it the
# rounding of evaluation.
CONFIG = TrainConfig(epochs=3, batch_size=32, lr=5e-3, progress=False, patience=100, threads=1)


def toy_split(n: int, seed: int) -> Split:
    """Label = which marker (5 or 6) the row holds, among filler tokens; rows of varied length."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 13, size=n)
    ids = rng.integers(7, 20, size=(n, 16)).astype(np.int32)
    labels = rng.integers(0, 2, size=n)
    ids[np.arange(n), rng.integers(0, lengths)] = np.where(labels == 1, 5, 6)
    ids[np.arange(16)[None, :] >= lengths[:, None]] = 0
    return Split(ids, lengths, labels.astype(np.int64))


TRAIN, VAL = toy_split(256, 0), toy_split(64, 1)


def run(state: Path, cfg: TrainConfig, train: Split = TRAIN) -> tuple[torch.nn.Module, History]:
    state.parent.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)  # the initial weights, as train_run seeds them
    model = build_model("transformer", MODEL)
    return model, fit(model, train, VAL, cfg, state_path=state)


@pytest.mark.parametrize("max_batch_tokens", [CONFIG.max_batch_tokens, 64])
def test_a_run_stopped_by_max_seconds_resumes_to_the_same_model(
    tmp_path: Path, max_batch_tokens: int
) -> None:
    # 64 tokens split every batch of 32 rows into micro-batches, each drawing its own dropout.
    config = replace(CONFIG, max_batch_tokens=max_batch_tokens)
    whole, whole_history = run(tmp_path / "whole" / RESUME, config)
    state = tmp_path / "parts" / RESUME
    # A budget this small stops every session after its first step: 8 steps an epoch, 3 epochs.
    budget = replace(config, max_seconds=1e-9)
    model, history = run(state, budget)
    sessions = 1
    while history.out_of_time:
        assert state.is_file() and sessions < 50
        model, history = run(state, replace(budget, resume=True))
        sessions += 1
    assert sessions == 8 * 3
    assert [h["epoch"] for h in history.epochs] == [
        1,
        2,
        3,
    ] and history.best_epoch == whole_history.best_epoch
    for got, want in zip(history.epochs, whole_history.epochs, strict=True):
        assert {k: v for k, v in got.items() if k != "seconds"} == {
            k: v for k, v in want.items() if k != "seconds"
        }
    for (name, got), want in zip(model.state_dict().items(), whole.state_dict().values(), strict=True):
        assert torch.equal(got, want), name


def test_a_state_from_another_run_or_no_state_is_refused(tmp_path: Path) -> None:
    state = tmp_path / RESUME
    with pytest.raises(ResumeError, match="nothing to resume"):
        run(state, replace(CONFIG, resume=True))
    _, history = run(state, replace(CONFIG, max_seconds=1e-9))
    assert history.out_of_time and state.is_file()
    with pytest.raises(ResumeError, match="different training settings"):
        run(state, replace(CONFIG, lr=1e-3, resume=True))
    with pytest.raises(ResumeError, match="different training data"):
        run(state, replace(CONFIG, resume=True), train=toy_split(256, 2))
    # Settings of one session (budget, progress, threads, micro-batch size) may change.
    _, history = run(state, replace(CONFIG, resume=True, threads=2, max_batch_tokens=64))
    assert not history.out_of_time and len(history.epochs) == 3


def test_a_state_saved_on_one_process_is_refused_on_two(tmp_path: Path) -> None:
    state = tmp_path / RESUME
    model, history = run(state, replace(CONFIG, max_seconds=1e-9))
    assert history.out_of_time and state.is_file() and isinstance(model, Classifier)
    assert read_state(state, fingerprint(model, CONFIG, TRAIN, VAL, processes=1))["loop"]["step"] == 1
    with pytest.raises(ResumeError, match="saved by a run on 1 process, and this one runs on 2"):
        read_state(state, fingerprint(model, CONFIG, TRAIN, VAL, processes=2))


def test_cli_resumes_until_done_and_then_has_nothing_to_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    args = ["--task", "greetings-food", "--model", "mean_pool", "--out", str(out), "--epochs", "3"]
    args += ["--no-progress", "--max-seconds", "1e-9"]
    assert train_main(args) == 0
    assert "add --resume" in capsys.readouterr().out
    runs = 1
    while (out / RESUME).is_file():
        assert train_main([*args, "--resume"]) == 0 and runs < 10
        runs += 1
    assert runs > 1
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["epochs_run"] == 3 and not metrics["out_of_time"]
    assert train_main([*args, "--resume"]) == 2
    err = capsys.readouterr().err.strip()  # the data report's notes, then the error in one line
    assert err.splitlines()[-1].startswith("attnserve-train: error: nothing to resume in ")
    assert "Traceback" not in err


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_drawn_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    logger = logging.getLogger("attnserve.training.loop.trainer")
    monkeypatch.setattr(logger, "level", logging.INFO)
    monkeypatch.setattr(logger, "propagate", False)  # only this test's handler: no CLI's left over
    piped = io.StringIO()
    monkeypatch.setattr("sys.stderr", piped)
    handler = logging.StreamHandler(piped)
    logger.addHandler(handler)
    try:
        run(tmp_path / "a" / RESUME, replace(CONFIG, epochs=1, progress=True))
    finally:
        logger.removeHandler(handler)
    # Not a terminal: no bar, one line for the epoch instead.
    assert piped.getvalue().startswith("epoch 1/1  step 8  train loss ") and "ETA" not in piped.getvalue()
    assert piped.getvalue().count("\n") == 1
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    handler = logging.StreamHandler(terminal)
    logger.addHandler(handler)
    try:
        run(tmp_path / "b" / RESUME, replace(CONFIG, epochs=1, progress=True))
    finally:
        logger.removeHandler(handler)
    drawn = terminal.getvalue()
    assert "epoch 1/1" in drawn and "step 8/8" in drawn and "text/s" in drawn and "ETA" in drawn
    assert "train loss 0" not in drawn  # on a terminal the bar says it: the epoch line is debug detail
