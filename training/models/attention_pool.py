"""Attention pooling: one learned global query attends over the tokens.

Keys and values are linear maps of token embeddings (plus positions); the pooled vector is
the attention-weighted sum of values, fed to the classifier head.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from attnserve.training.models.base import (
    POSITIONS,
    AttentionPool,
    Classifier,
    ModelConfig,
    PositionalEncoding,
    check_inputs,
    make_head,
)
from attnserve.training.models.init import init_weights


@dataclass(frozen=True)
class AttentionPoolConfig(ModelConfig):
    d_model: int = 64
    positions: str = "learned"  # none | learned | sinusoidal

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_at_least(1, "d_model")
        self.require_choice("positions", POSITIONS)


class AttentionPoolClassifier(Classifier):
    family = "attention_pool"
    attention_kind = "pool"
    config_cls = AttentionPoolConfig
    config: AttentionPoolConfig

    def __init__(self, config: AttentionPoolConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = PositionalEncoding(config.positions, config.max_len, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.pool = AttentionPool(config.d_model)
        self.head = make_head(config.head, config.d_model, config.num_classes)
        self.apply(init_weights)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        check_inputs(input_ids, attention_mask, self.config.max_len)
        mask = attention_mask.bool()  # [B, T]
        x = self.drop(self.positions(self.embed(input_ids)))  # [B, T, D]
        pooled, weights = self.pool(x, mask)  # [B, D], [B, T]
        return self.head(pooled), weights  # [B, C], [B, T]
