"""The --data plan: a pure function of the data's size, classes and budget, and how a run applies it."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnserve.training.data.plan import ANCHOR_ROWS, MIN_WIDTH_SCALE, Plan, plan
from attnserve.training.data.recipe import DataRecipe, planned_model
from attnserve.training.loop.config import TrainConfig
from attnserve.training.models import FAMILIES

rows = st.integers(min_value=1, max_value=2_000_000)
classes = st.integers(min_value=2, max_value=50)


def test_sst2_keeps_the_measured_recipe() -> None:
    assert plan(ANCHOR_ROWS, 2) == Plan(3000, 0, 3, 1.0, 0.0, False)
    assert plan(ANCHOR_ROWS, 2, 900.0).fit_budget


def test_a_few_thousand_rows_validate_within_epochs_and_wait_longer() -> None:
    small = plan(4500, 2)  # 71 steps an epoch
    assert 0 < small.eval_every < 71 and small.steps <= 12 * 71
    assert small.patience * small.eval_every >= 2 * 71  # a few noisy looks never end the run
    assert small.width_scale == MIN_WIDTH_SCALE and small.extra_dropout > 0


@given(rows, rows, classes)
def test_more_rows_never_plan_fewer_steps_nor_a_narrower_model(a: int, b: int, c: int) -> None:
    low, high = plan(min(a, b), c), plan(max(a, b), c)
    assert low.steps <= high.steps
    per_epoch = [-(-n // 64) for n in (min(a, b), max(a, b))]
    assert low.eval_spacing(per_epoch[0]) <= high.eval_spacing(per_epoch[1])
    assert low.width_scale <= high.width_scale and low.extra_dropout >= high.extra_dropout


@given(rows, classes, classes)
def test_more_classes_add_dropout_and_change_nothing_else(n: int, a: int, b: int) -> None:
    few, many = plan(n, min(a, b)), plan(n, max(a, b))
    assert few.extra_dropout <= many.extra_dropout
    assert dataclasses.replace(few, extra_dropout=0) == dataclasses.replace(many, extra_dropout=0)


@given(rows, classes, st.floats(min_value=0, max_value=1e6))
def test_every_plan_is_sound_and_the_same_for_the_same_inputs(n: int, c: int, budget: float) -> None:
    made = plan(n, c, budget)
    assert made == plan(n, c, budget)
    assert made.steps >= 1 and made.patience >= 3 and made.eval_every >= 0
    assert MIN_WIDTH_SCALE <= made.width_scale <= 1 and 0 <= made.extra_dropout <= 0.1
    assert made.fit_budget == (budget > 0)


def test_nonsense_is_refused() -> None:
    for args in ((0, 2), (10, 1)):
        with pytest.raises(ValueError, match="a plan needs"):
            plan(*args)


def test_flags_given_win_over_the_plan() -> None:
    cfg, model, made = DataRecipe().apply(TrainConfig(), "gru_attention", {}, 4500, 2)
    assert (cfg.target_steps, cfg.patience, cfg.eval_every, cfg.min_steps) == (
        made.steps,
        made.patience,
        made.eval_every,
        0,
    )
    assert model == {"d_model": 64, "dropout": 0.575}
    given_cfg = TrainConfig(patience=4, eval_every=7)
    cfg, model, _ = DataRecipe(frozenset({"patience", "eval_every"})).apply(
        given_cfg, "gru_attention", {"d_model": 32}, 4500, 2
    )
    assert (cfg.patience, cfg.eval_every, model["d_model"]) == (4, 7, 32)


@pytest.mark.parametrize("family", sorted(set(FAMILIES) - {"encoder"}))
def test_every_family_builds_with_its_planned_fields(family: str) -> None:
    model = planned_model(family, {}, plan(1000, 5))
    assert model  # narrower, more dropout, or both
    FAMILIES[family].config_cls(vocab_size=8, **model)


def test_a_pretrained_encoder_keeps_its_checkpoints_size() -> None:
    assert planned_model("encoder", {"head": "cls"}, plan(1000, 5)) == {"head": "cls"}


def test_word_vectors_keep_their_width() -> None:
    _, model, made = DataRecipe(keep_width=True).apply(TrainConfig(), "gru_attention", {}, 4500, 2)
    assert model == {"dropout": 0.575} and made.width_scale == 1.0


def test_a_distilled_students_plan_takes_more_steps_unless_a_flag_sets_them() -> None:
    plain, _, made = DataRecipe().apply(TrainConfig(), "gru_attention", {}, 148_795, 2)
    student, _, _ = DataRecipe(steps_factor=3.0).apply(TrainConfig(), "gru_attention", {}, 148_795, 2)
    assert (plain.target_steps, student.target_steps) == (made.steps, 3 * made.steps) == (3000, 9000)
    given, _, _ = DataRecipe(frozenset({"target_steps"}), steps_factor=3.0).apply(
        TrainConfig(target_steps=500), "gru_attention", {}, 148_795, 2
    )
    assert given.target_steps == 500
