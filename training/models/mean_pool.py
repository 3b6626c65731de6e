"""Mean pooling: token embeddings averaged over the real tokens, then a classifier head.

The order-blind baseline. Its "attention" is the uniform weights it averaged with.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from attnserve.training.models.base import (
    POSITIONS,
    Classifier,
    ModelConfig,
    PositionalEncoding,
    check_inputs,
    make_head,
    masked_mean,
)
from attnserve.training.models.init import init_weights


@dataclass(frozen=True)
class MeanPoolConfig(ModelConfig):
    d_model: int = 64
    positions: str = "none"  # none | learned | sinusoidal

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_at_least(1, "d_model")
        self.require_choice("positions", POSITIONS)


class MeanPoolClassifier(Classifier):
    family = "mean_pool"
    attention_kind = "pool"
    config_cls = MeanPoolConfig
    config: MeanPoolConfig

    def __init__(self, config: MeanPoolConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = PositionalEncoding(config.positions, config.max_len, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.head = make_head(config.head, config.d_model, config.num_classes)
        self.apply(init_weights)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        check_inputs(input_ids, attention_mask, self.config.max_len)
        mask = attention_mask.bool()  # [B, T]
        x = self.drop(self.positions(self.embed(input_ids)))  # [B, T, D]
        pooled, weights = masked_mean(x, mask)  # [B, D], [B, T]
        return self.head(pooled), weights  # [B, C], [B, T]
