"""What `attnserve-train tune` searches: the family, then the settings that matter for it.

Ranges are those where SST-2's validation accuracy moved (docs/results/sst2.md): learning
rate, the three kinds of regularisation (dropout, word dropout, weight decay) and the width;
a family's own structure (convolution width, pooling queries, layers) comes after.
A family that fine-tunes a checkpoint (--pretrained) has its size from it: the search draws
what fine-tuning is sensitive to (training/models/encoder.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna

from attnserve.training.models import REGISTRY

# The families searched when none are named: bow_mlp has no attention to return.
SEARCHED = (
    "conv_attention",
    "gru_attention",
    "attention_pool",
    "mean_pool",
    "self_attention",
    "transformer",
    "bow_mlp",
)


@dataclass(frozen=True)
class TrialSettings:
    family: str
    model: dict[str, Any]  # config fields of the family
    training: dict[str, Any]  # TrainConfig fields


def suggest(trial: optuna.Trial, families: tuple[str, ...]) -> TrialSettings:
    """One point of the search space, drawn by the study's sampler: the family, then its own
    space (each family's module defines it)."""
    family = str(trial.suggest_categorical("family", list(families)))
    model, training = REGISTRY[family].search(trial)
    return TrialSettings(family, model, training)


def fine_tuned_families() -> tuple[str, ...]:
    """The families searched with --pretrained: those that start from a checkpoint."""
    return tuple(name for name, family in REGISTRY.items() if family.checkpoint is not None)
