"""One self-attention layer over the tokens, then a mean over the real tokens.

Queries and keys are ``qk_dim`` wide (k in the usual notation), which may be narrower than
d_model; values keep d_model. The layer is residual, so each token keeps its own embedding
and adds what it gathered from the others.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from attnserve.training.models.base import (
    POSITIONS,
    Classifier,
    ModelConfig,
    PositionalEncoding,
    SelfAttention,
    check_inputs,
    make_head,
    masked_mean,
)
from attnserve.training.models.init import init_for_word_order


@dataclass(frozen=True)
class SelfAttentionConfig(ModelConfig):
    d_model: int = 64
    qk_dim: int = 32
    positions: str = "learned"  # none | learned | sinusoidal
    qk_init_gain: float = 2.0  # query/key weights start at this multiple of PyTorch's default

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_at_least(1, "d_model", "qk_dim")
        self.require_positive("qk_init_gain")
        self.require_choice("positions", POSITIONS)


class SelfAttentionClassifier(Classifier):
    family = "self_attention"
    attention_kind = "self"
    config_cls = SelfAttentionConfig
    config: SelfAttentionConfig

    def __init__(self, config: SelfAttentionConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = PositionalEncoding(config.positions, config.max_len, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.attn = SelfAttention(config.d_model, 1, config.qk_dim, config.dropout)
        self.norm = nn.LayerNorm(config.d_model)
        self.head = make_head(config.head, config.d_model, config.num_classes)
        init_for_word_order(self, self.embed, self.positions, config.qk_init_gain)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        check_inputs(input_ids, attention_mask, self.config.max_len)
        mask = attention_mask.bool()  # [B, T]
        x = self.drop(self.positions(self.embed(input_ids)))  # [B, T, D]
        y, weights = self.attn(x, mask)  # [B, T, D], [B, 1, T, T]
        x = self.norm(x + self.drop(y))  # [B, T, D]
        pooled, _ = masked_mean(x, mask)  # [B, D]
        return self.head(pooled), weights.squeeze(1)  # [B, C], [B, T, T]
