"""What `attnserve-train tune` searches: the family, then the settings that matter for it.

Ranges are those where SST-2's validation accuracy moved (docs/results/sst2.md): learning
rate, the three kinds of regularisation (dropout, word dropout, weight decay) and the width;
a family's own structure (convolution width, pooling queries, layers) comes after.
A pretrained encoder (--pretrained) has its size from its checkpoint: the search draws what
fine-tuning is sensitive to, the learning rate and batch size around the BERT paper's grid
(2e-5 to 5e-5, batch 16 or 32, widened a little), and the head.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna

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
SEQUENCE_WIDTHS = (32, 64, 128)
ENCODER_HEADS = ("cls", "attention")


@dataclass(frozen=True)
class TrialSettings:
    family: str
    model: dict[str, Any]  # config fields of the family
    training: dict[str, Any]  # TrainConfig fields


def suggest(trial: optuna.Trial, families: tuple[str, ...]) -> TrialSettings:
    """One point of the search space, drawn by the study's sampler."""
    family = str(trial.suggest_categorical("family", list(families)))
    if family == "encoder":
        return suggest_encoder(trial)
    training: dict[str, Any] = {
        "lr": trial.suggest_float("lr", 2e-4, 5e-3, log=True),
        "weight_decay": trial.suggest_float("weight_decay", 1e-3, 0.3, log=True),
        "word_dropout": trial.suggest_float("word_dropout", 0.0, 0.4),
    }
    model: dict[str, Any] = {"dropout": trial.suggest_float("dropout", 0.0, 0.6)}
    if family == "bow_mlp":
        model["hidden"] = trial.suggest_categorical("hidden", [64, 128, 256])
        model["features"] = trial.suggest_categorical("features", ["counts", "binary"])
        return TrialSettings(family, model, training)
    model["d_model"] = trial.suggest_categorical("d_model", list(SEQUENCE_WIDTHS))
    if family == "conv_attention":
        model["kernel_size"] = trial.suggest_categorical("kernel_size", [3, 5])
        model["conv_layers"] = trial.suggest_int("conv_layers", 1, 2)
        model["n_queries"] = trial.suggest_categorical("n_queries", [1, 2, 4])
    elif family == "gru_attention":
        model["n_queries"] = trial.suggest_categorical("n_queries", [1, 2, 4])
        model["ngram_buckets"] = trial.suggest_categorical("ngram_buckets", [0, 65536])
    elif family == "transformer":
        model["n_layers"] = trial.suggest_int("n_layers", 1, 2)
        model["n_heads"] = trial.suggest_categorical("n_heads", [1, 2, 4])
    elif family == "attention_pool":
        model["positions"] = trial.suggest_categorical("positions", ["none", "learned", "sinusoidal"])
    return TrialSettings(family, model, training)


def suggest_encoder(trial: optuna.Trial) -> TrialSettings:
    """A fine-tuning trial of the pretrained encoder."""
    training: dict[str, Any] = {
        "lr": trial.suggest_float("lr", 1e-5, 1e-4, log=True),
        "batch_size": trial.suggest_categorical("batch_size", [16, 32]),
    }
    model: dict[str, Any] = {"head": trial.suggest_categorical("head", list(ENCODER_HEADS))}
    return TrialSettings("encoder", model, training)
