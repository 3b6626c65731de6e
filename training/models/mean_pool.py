"""Mean pooling: token embeddings averaged over the real tokens, then a classifier head.

The order-blind baseline. Its "attention" is the uniform weights it averaged with.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from attnserve.training.models.base import SequenceClassifier
from attnserve.training.models.config import SequenceConfig
from attnserve.training.models.families import Family, small_space
from attnserve.training.models.layers import masked_mean


@dataclass(frozen=True)
class MeanPoolConfig(SequenceConfig):
    positions: str = "none"  # none | learned | sinusoidal


class MeanPoolClassifier(SequenceClassifier):
    family = "mean_pool"
    attention_kind = "pool"
    config_cls = MeanPoolConfig
    config: MeanPoolConfig

    def build(self) -> None:
        pass  # averaging has no weights of its own

    def features(self, x: Tensor, mask: Tensor, with_attention: bool) -> tuple[Tensor, Tensor]:
        return masked_mean(x, mask)  # [B, D], [B, T]


FAMILY = Family(MeanPoolClassifier.family, MeanPoolClassifier, search=small_space())
