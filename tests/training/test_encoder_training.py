"""The loop settings fine-tuning needs: linear decay, validation within an epoch (patience
counted in validations), a plan that fits the budget, progress lines off a terminal, and the
fine-tuning recipe under the flags given."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from attnserve.training.cli.main import build_parser, resolve_family, train_config
from attnserve.training.loop.config import TrainConfig
from attnserve.training.loop.schedule import BUDGET_SHARE, LearningRate, budget_steps
from attnserve.training.loop.trainer import Split, fit, make_optimizer
from attnserve.training.models import Classifier, build_model


def toy_split(n: int, seed: int) -> Split:
    """Label = which marker token (5 or 6) the row holds among random filler tokens."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(7, 20, size=(n, 8))
    labels = rng.integers(0, 2, size=n)
    ids[np.arange(n), rng.integers(0, 8, size=n)] = np.where(labels == 1, 5, 6)
    return Split(ids.astype(np.int32), np.full(n, 8), labels.astype(np.int64))


def toy_model() -> Classifier:
    return build_model("mean_pool", {"vocab_size": 20, "num_classes": 2, "max_len": 8, "d_model": 8})


def test_linear_schedule_warms_up_then_falls_in_a_straight_line_to_zero() -> None:
    rate = LearningRate(TrainConfig(schedule="linear", warmup_fraction=0.1), 100)
    assert rate.warmup == 10
    assert [rate(s) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])
    assert [rate(s) for s in (10, 55, 100, 120)] == pytest.approx([1.0, 0.5, 0.0, 0.0])
    assert rate(30) - rate(31) == pytest.approx(rate(70) - rate(71))  # the same fall every step
    cosine = LearningRate(TrainConfig(warmup_fraction=0.1), 100)
    assert cosine(55) == pytest.approx(0.5) and cosine(30) > rate(30)  # cosine keeps more early


def test_a_shorter_plan_moves_the_end_of_the_decay_and_survives_the_schedulers_state() -> None:
    model = toy_model()
    sched = make_optimizer(model, TrainConfig(schedule="linear", lr=1.0), 1000)[1]
    rate = sched.lr_lambdas[0]
    assert isinstance(rate, LearningRate)
    rate.plan(200)
    assert (rate.total, rate.planned, rate.warmup) == (200, 1000, 10)
    assert rate(200) == 0.0 and rate(105) == pytest.approx(0.5)
    again = make_optimizer(model, TrainConfig(schedule="linear", lr=1.0), 1000)[1]
    again.load_state_dict(sched.state_dict())  # what --resume restores
    restored = again.lr_lambdas[0]
    assert isinstance(restored, LearningRate) and restored.total == 200


def test_budget_steps_are_those_the_rest_of_the_budget_covers_at_the_pace_so_far() -> None:
    # 0.2 s a step; 98 s left of 100 -> 98 * 0.95 / 0.2 steps more.
    assert budget_steps(10, 0.2, 2.0, 100.0) == 10 + int(98 * BUDGET_SHARE / 0.2)
    assert budget_steps(40, 0.2, 2.0, 100.0) == 40 + int(98 * BUDGET_SHARE / 0.2)  # earlier sessions count
    assert budget_steps(10, 0.2, 120.0, 100.0) == 10  # over budget: no more steps


def test_validation_every_n_steps_keeps_rows_and_patience_counts_validations() -> None:
    train, val = toy_split(96, 0), toy_split(32, 1)  # 6 steps an epoch at batch 16
    cfg = TrainConfig(epochs=2, batch_size=16, eval_every=4, patience=50, progress=False, threads=1)
    history = fit(toy_model(), train, val, cfg)
    assert [(row["epoch"], row["step"]) for row in history.epochs] == [(1, 4), (1, 6), (2, 8), (2, 12)]
    # A learning rate of 0 never improves after the first look: stop after `patience` more.
    still = TrainConfig(epochs=5, batch_size=16, eval_every=2, patience=2, lr=0.0, progress=False, threads=1)
    stopped = fit(toy_model(), train, val, still)
    assert [row["step"] for row in stopped.epochs] == [2, 4, 6] and stopped.stopped_early


def test_off_a_terminal_a_progress_line_comes_every_log_every_steps(caplog: pytest.LogCaptureFixture) -> None:
    cfg = TrainConfig(epochs=1, batch_size=16, log_every=2, progress=True, threads=1)
    with caplog.at_level(logging.INFO, logger="attnserve.training"):
        fit(toy_model(), toy_split(96, 0), toy_split(16, 1), cfg)
    lines = [r.getMessage() for r in caplog.records if "texts/s" in r.getMessage()]
    assert [line.split("  ")[1] for line in lines] == ["step 2/6", "step 4/6", "step 6/6"]


def test_pretrained_runs_take_the_fine_tuning_recipe_under_the_flags_given(tmp_path: Path) -> None:
    def config(*flags: str) -> TrainConfig:
        ns = build_parser().parse_args(["--data", "x.csv", *flags])
        resolve_family(ns)
        return train_config(ns)

    tuned = config("--pretrained", str(tmp_path))
    assert (tuned.lr, tuned.batch_size, tuned.schedule, tuned.warmup_fraction) == (5e-5, 32, "linear", 0.06)
    assert (tuned.eval_every, tuned.word_dropout, tuned.min_steps, tuned.plan_to_budget) == (
        100,
        0.0,
        0,
        True,
    )
    assert config("--pretrained", str(tmp_path), "--lr", "3e-5", "--eval-every", "50").lr == 3e-5
    assert config().schedule == "cosine" and config().eval_every == 0  # --data alone: unchanged


def test_a_budget_too_short_for_the_epochs_shortens_the_plan(caplog: pytest.LogCaptureFixture) -> None:
    # 6 steps an epoch for 1000 epochs: no step is fast enough for 6000 of them in 2 s.
    cfg = TrainConfig(epochs=1000, batch_size=16, max_seconds=2.0, plan_to_budget=True, schedule="linear",
                      eval_every=20, patience=10**6, progress=False, threads=1)  # fmt: skip
    with caplog.at_level(logging.INFO, logger="attnserve.training"):
        history = fit(toy_model(), toy_split(96, 0), toy_split(16, 1), cfg)
    assert any("budget covers about" in r.getMessage() for r in caplog.records)
    last = history.epochs[-1]
    assert last["step"] < 6000
    assert last["lr"] == 0.0 or history.out_of_time  # the decay ended with the plan, or time cut it
