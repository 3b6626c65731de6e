"""One self-attention layer over the tokens, then a mean over the real tokens.

Queries and keys are ``qk_dim`` wide (k in the usual notation), which may be narrower than
d_model; values keep d_model. The layer is residual, so each token keeps its own embedding
and adds what it gathered from the others.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from attnserve.training.models.base import SequenceClassifier
from attnserve.training.models.config import SequenceConfig
from attnserve.training.models.families import Family, small_space
from attnserve.training.models.init import init_for_word_order
from attnserve.training.models.layers import SelfAttention, masked_mean


@dataclass(frozen=True)
class SelfAttentionConfig(SequenceConfig):
    qk_dim: int = 32
    qk_init_gain: float = 2.0  # query/key weights start at this multiple of PyTorch's default

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_at_least(1, "qk_dim")
        self.require_positive("qk_init_gain")


class SelfAttentionClassifier(SequenceClassifier):
    family = "self_attention"
    attention_kind = "self"
    config_cls = SelfAttentionConfig
    config: SelfAttentionConfig

    def build(self) -> None:
        self.attn = SelfAttention(self.config.d_model, 1, self.config.qk_dim, self.config.dropout)
        self.norm = nn.LayerNorm(self.config.d_model)

    def reset_weights(self) -> None:
        init_for_word_order(self, self.embed, self.positions, self.config.qk_init_gain)

    def features(self, x: Tensor, mask: Tensor, with_attention: bool) -> tuple[Tensor, Tensor | None]:
        y, weights = self.attn(x, mask, with_attention)  # [B, T, D], [B, 1, T, T] or None
        x = self.norm(x + self.drop(y))  # [B, T, D]
        pooled, _ = masked_mean(x, mask)  # [B, D]
        return pooled, None if weights is None else weights.squeeze(1)  # [B, D], [B, T, T]


FAMILY = Family(SelfAttentionClassifier.family, SelfAttentionClassifier, search=small_space())
