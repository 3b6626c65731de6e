"""The --data recipe's plan, scaled with the data: steps, validations, patience, capacity.

A pure function of the data's size, its classes and the budget. The anchor is SST-2 (67,349
training rows, 2 classes, 1,053 steps an epoch at batch 64), where the recipe was measured:
about 3000 steps, one validation an epoch, patience 3 (docs/results/sst2.md). A set with
at least ``LARGE_EPOCH_STEPS`` steps an epoch keeps exactly that.

A smaller set makes short epochs, so 3000 steps would be dozens of epochs whose cosine
schedule is still near its peak rate when validation stops improving. It gets instead:
- at most ``MAX_EPOCHS`` epochs of steps (never under ``MIN_STEPS``), so the schedule
  decays over the epochs that matter;
- ``EVALS_PER_EPOCH`` validations an epoch (never closer than ``MIN_EVAL_STEPS`` steps), so
  the kept point is found between epochs;
- patience, counted in validations, covering ``PATIENCE_SHARE`` of the planned ones
  (never under 3): a small validation split is noisy, and three noisy points end a run early;
- a narrower model as rows fall below SST-2's (the width scales with their square root, at
  least by half), and more dropout as rows per class do: the capacity tuned on 33,000 rows
  a class memorises a few hundred. Classes beyond two count only there: the rest of the plan,
  and the recipe's selection by validation loss, hold for any number of classes.

With a budget (max_seconds) the plan asks the trainer to fit its steps to it once the first
steps are timed (TrainConfig.plan_to_budget), so the schedule ends inside the budget instead of
being cut off at a high learning rate; a budget longer than the plan is not spent on steps
past the point where validation stops improving: patience ends the run, the best point kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ANCHOR_ROWS = 67_349  # SST-2's training rows, 2 classes
ANCHOR_ROWS_PER_CLASS = ANCHOR_ROWS / 2
ANCHOR_STEPS = 3000
ANCHOR_PATIENCE = 3
LARGE_EPOCH_STEPS = 500  # an epoch this long or longer: the anchor's plan, one validation an epoch
MAX_EPOCHS = 12
MIN_STEPS = 600
EVALS_PER_EPOCH = 4
MIN_EVAL_STEPS = 10
PATIENCE_SHARE = 0.25
MIN_WIDTH_SCALE = 0.5
MAX_EXTRA_DROPOUT = 0.1


def _scale(share: float) -> float:
    """sqrt of the data's share of the anchor's, between MIN_WIDTH_SCALE and 1."""
    return min(max(math.sqrt(share), MIN_WIDTH_SCALE), 1.0)


@dataclass(frozen=True)
class Plan:
    steps: int  # optimisation steps the schedule is planned over (TrainConfig.target_steps)
    eval_every: int  # steps between validations; 0: once an epoch
    patience: int  # validations without improvement before stopping
    width_scale: float  # the family's default width times this (1: unchanged)
    extra_dropout: float  # added to the family's default dropout (0: unchanged)
    fit_budget: bool  # shorten the steps to the budget once a step is timed (TrainConfig.plan_to_budget)

    def eval_spacing(self, steps_per_epoch: int) -> int:
        return self.eval_every or steps_per_epoch


def plan(
    n_train: int,
    n_classes: int,
    max_seconds: float = 0.0,
    *,
    batch_size: int = 64,
) -> Plan:
    """The plan for ``n_train`` training rows of ``n_classes`` classes within ``max_seconds`` (0: none)."""
    if n_train < 1 or n_classes < 2 or batch_size < 1 or max_seconds < 0:
        raise ValueError(
            f"a plan needs rows >= 1, classes >= 2, batch >= 1 and a budget >= 0; got {n_train}, "
            f"{n_classes}, {batch_size} and {max_seconds}"
        )
    per_epoch = math.ceil(n_train / batch_size)
    scale = _scale(n_train / ANCHOR_ROWS)
    extra_dropout = round(
        MAX_EXTRA_DROPOUT
        * (1.0 - _scale(n_train / n_classes / ANCHOR_ROWS_PER_CLASS))
        / (1.0 - MIN_WIDTH_SCALE),
        4,
    )
    if per_epoch >= LARGE_EPOCH_STEPS:
        steps, eval_every = ANCHOR_STEPS, 0
    else:
        steps = max(min(ANCHOR_STEPS, MAX_EPOCHS * per_epoch), MIN_STEPS)
        eval_every = max(MIN_EVAL_STEPS, math.ceil(per_epoch / EVALS_PER_EPOCH))
        eval_every = 0 if eval_every >= per_epoch else eval_every
    spacing = eval_every or per_epoch
    patience = ANCHOR_PATIENCE
    if per_epoch < LARGE_EPOCH_STEPS:
        patience = max(ANCHOR_PATIENCE, math.ceil(PATIENCE_SHARE * steps / spacing))
    return Plan(steps, eval_every, patience, round(scale, 4), extra_dropout, max_seconds > 0)
