"""The recipe for users' own data (``--data``): family and trainer settings measured on real text.

Built-in tasks keep their own recipes (training/data/tasks.py); these apply only with
``--data``, under any flag given. They were chosen on SST-2's validation split (67,349 short
training phrases, 872 sentences; docs/results/sst2.md):
- every sequence family overfit those phrases after the first epoch (validation loss rising
  from epoch 2 while training loss fell), so the recipe keeps the epoch with the lowest
  validation loss and stops 3 epochs after it;
- 25 planned epochs left that first epoch in its warmup and at full learning rate
  (gru_attention: validation 0.790); planning about 3000 steps ends the schedule with the
  epochs that matter;
- the family and its learning rate, weight decay and word dropout (with the width, dropout
  and queries in GRUAttentionConfig) are the best trial of `attnserve-train tune` over every
  family; over 3 seeds it scored 0.824 on validation, mean_pool 0.820, bow_mlp 0.812;
- the tokenizer stays WordLevel: WordPiece and BPE scored 0.805-0.818 on validation against
  its 0.829 (two seeds each); a bag of hashed bigrams (--ngram-buckets) cost 3.9x the CPU
  for no gain on test, so it is not part of the recipe.

Those fixed settings hold at every size; the steps, the validations, the patience and the
model's width and dropout are planned from the data's size once it is loaded
(training/data/plan.py), SST-2's own plan being the settings above.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from attnserve.training.data.plan import Plan, plan
from attnserve.training.loop.config import TrainConfig
from attnserve.training.models import FAMILIES, REGISTRY

DATA_FAMILY = "gru_attention"
# (TrainConfig field, value) for --data, where no flag sets them.
DATA_TRAINING: tuple[tuple[str, int | float | str], ...] = (
    ("target_steps", 3000),
    ("patience", 3),
    ("select_by", "loss"),
    ("lr", 0.00353),
    ("weight_decay", 0.244),
    ("word_dropout", 0.153),
)
WIDTH_FIELDS = ("d_model", "hidden")  # a family's width: sequence families, bow_mlp
WIDTH_STEP = 8  # planned widths are multiples of this (heads and queries divide them)
MAX_DROPOUT = 0.6


@dataclass(frozen=True)
class DataRecipe:
    """The plan for --data, applied where no flag set a field (``given``: the trainer flags given)."""

    given: frozenset[str] = frozenset()
    keep_width: bool = False  # word vectors (--init-embeddings) set the width
    steps_factor: float = 1.0  # a distilled student's plan is longer (training/distill/cli.py)

    def apply(
        self, cfg: TrainConfig, family: str, overrides: dict[str, Any], n_train: int, n_classes: int
    ) -> tuple[TrainConfig, dict[str, Any], Plan]:
        """The run's trainer settings and model fields under the plan for its data."""
        made = plan(n_train, n_classes, cfg.max_seconds, batch_size=cfg.batch_size)
        names = {f.name for f in dataclasses.fields(TrainConfig)}
        steps = round(made.steps * self.steps_factor)
        planned: dict[str, Any] = {"target_steps": steps, "min_steps": 0, "patience": made.patience}
        if made.fit_budget and "plan_to_budget" in names:
            planned["plan_to_budget"] = True
        if "eval_every" in names:
            planned["eval_every"] = made.eval_every
        else:  # a trainer that validates once an epoch: the same patience in epochs
            per_epoch = math.ceil(n_train / cfg.batch_size)
            planned["patience"] = max(3, math.ceil(made.patience * made.eval_spacing(per_epoch) / per_epoch))
        if "min_steps" in self.given:  # a floor the user asked for still holds
            del planned["min_steps"]
        cfg = dataclasses.replace(cfg, **{k: v for k, v in planned.items() if k not in self.given})
        if self.keep_width:
            made = dataclasses.replace(made, width_scale=1.0)
        return cfg, planned_model(family, overrides, made), made


def planned_model(family: str, overrides: dict[str, Any], made: Plan) -> dict[str, Any]:
    """``overrides`` with the plan's width and dropout for the fields they leave to the family."""
    if family not in REGISTRY or not REGISTRY[family].recipe.planned:  # a checkpoint's size, say
        return dict(overrides)
    defaults: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(FAMILIES[family].config_cls)}
    out = dict(overrides)
    for name in WIDTH_FIELDS:
        if name in defaults and name not in overrides and made.width_scale < 1.0:
            out[name] = max(WIDTH_STEP, round(defaults[name] * made.width_scale / WIDTH_STEP) * WIDTH_STEP)
    if "dropout" in defaults and "dropout" not in overrides and made.extra_dropout > 0:
        out["dropout"] = round(min(defaults["dropout"] + made.extra_dropout, MAX_DROPOUT), 4)
    try:  # a width the family's other fields do not divide (heads, queries): keep its own
        FAMILIES[family].config_cls(vocab_size=8, **out)
    except (ValueError, TypeError):
        return {k: v for k, v in out.items() if k in overrides or k not in WIDTH_FIELDS}
    return out
