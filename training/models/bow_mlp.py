"""Bag-of-words MLP: token counts (or presence) over the vocabulary, then an MLP.

The word-order-blind baseline; it has no attention and returns None in its place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnserve.training.models.base import Classifier, check_inputs
from attnserve.training.models.config import ModelConfig
from attnserve.training.models.families import Family, Trial, small_space
from attnserve.training.models.init import init_weights
from attnserve.training.models.layers import make_head

FEATURES = ("counts", "binary")


@dataclass(frozen=True)
class BowMLPConfig(ModelConfig):
    hidden: int = 128
    n_layers: int = 1  # hidden layers before the head
    features: str = "counts"  # counts | binary (word present or not)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_at_least(1, "hidden", "n_layers")
        self.require_choice("features", FEATURES)


class BowMLPClassifier(Classifier):
    family = "bow_mlp"
    attention_kind = "none"
    config_cls = BowMLPConfig
    config: BowMLPConfig

    def __init__(self, config: BowMLPConfig) -> None:
        super().__init__(config)
        layers: list[nn.Module] = []
        width = config.vocab_size
        for _ in range(config.n_layers):
            layers += [nn.Linear(width, config.hidden), nn.GELU(), nn.Dropout(config.dropout)]
            width = config.hidden
        self.mlp = nn.Sequential(*layers)
        self.head = make_head(config.head, config.hidden, config.num_classes)
        self.apply(init_weights)

    def classify(
        self, input_ids: Tensor, attention_mask: Tensor, *, with_attention: bool
    ) -> tuple[Tensor, None]:
        check_inputs(input_ids, attention_mask, self.config.max_len)
        real = attention_mask.to(torch.float32)  # [B, T]
        # Padding adds 0 to its column, so extra padding leaves the bag unchanged.
        counts = torch.zeros_like(real[:, :1]).expand(-1, self.config.vocab_size)  # [B, V]
        counts = counts.scatter_add(1, input_ids, real)  # [B, V]
        if self.config.features == "binary":
            counts = counts.clamp(max=1.0)  # [B, V]
        return self.head(self.mlp(counts)), None  # [B, C]


def _space(trial: Trial) -> dict[str, Any]:
    return {
        "hidden": trial.suggest_categorical("hidden", [64, 128, 256]),
        "features": trial.suggest_categorical("features", ["counts", "binary"]),
    }


FAMILY = Family(BowMLPClassifier.family, BowMLPClassifier, search=small_space(_space, sequence=False))
