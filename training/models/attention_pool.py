"""Attention pooling: one learned global query attends over the tokens.

Keys and values are linear maps of token embeddings (plus positions); the pooled vector is
the attention-weighted sum of values, fed to the classifier head.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor

from attnserve.training.models.base import SequenceClassifier
from attnserve.training.models.config import SequenceConfig
from attnserve.training.models.families import Family, Trial, small_space
from attnserve.training.models.layers import AttentionPool


@dataclass(frozen=True)
class AttentionPoolConfig(SequenceConfig):
    """d_model and positions (learned by default) are all it needs."""


class AttentionPoolClassifier(SequenceClassifier):
    family = "attention_pool"
    attention_kind = "pool"
    config_cls = AttentionPoolConfig
    config: AttentionPoolConfig

    def build(self) -> None:
        self.pool = AttentionPool(self.config.d_model)

    def features(self, x: Tensor, mask: Tensor, with_attention: bool) -> tuple[Tensor, Tensor]:
        pooled, weights = self.pool(x, mask)  # [B, D], [B, T]: one query's weights cost nothing to keep
        return pooled, weights


def _space(trial: Trial) -> dict[str, Any]:
    return {"positions": trial.suggest_categorical("positions", ["none", "learned", "sinusoidal"])}


FAMILY = Family(AttentionPoolClassifier.family, AttentionPoolClassifier, search=small_space(_space))
