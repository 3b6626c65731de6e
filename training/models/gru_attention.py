"""Attention pooling over a bidirectional GRU: each token read with everything before and after it.

The forward GRU reads the padded batch as it is: with padding on the right, a real token's
state never depends on what follows the text. The backward GRU reads each row reversed in
place (its last real token first, padding still last), so it too never reads padding before
a real token; its states are put back in the original order. A text's output therefore does
not depend on how much padding its batch has. ``n_queries`` learned queries then pool the
states as in conv_attention; the attention returned is their mean, [B, T], padding exactly 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnserve.training.models.base import SequenceClassifier
from attnserve.training.models.config import SequenceConfig, require
from attnserve.training.models.families import Family, Trial, small_space
from attnserve.training.models.layers import MultiQueryPool, masked_mean


@dataclass(frozen=True)
class GRUAttentionConfig(SequenceConfig):
    # Width, dropout and queries found by `attnserve-train tune` on SST-2's validation split.
    d_model: int = 128
    positions: str = "none"  # none | learned | sinusoidal (the GRU already reads in order)
    dropout: float = 0.475
    n_queries: int = 2  # attention-pooling queries, each pooling d_model / n_queries features
    bag: bool = True  # add the mean of the token embeddings (a bag of words) to the pooled vector

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_at_least(1, "n_queries")
        require(self.d_model % 2 == 0, f"GRUAttentionConfig.d_model must be even, got {self.d_model}")
        require(
            self.d_model % self.n_queries == 0,
            f"GRUAttentionConfig.d_model={self.d_model} must be divisible by n_queries={self.n_queries}",
        )


def reverse_in_place(x: Tensor, mask: Tensor) -> Tensor:
    """Each row's real tokens in reverse order, padding left where it is: [B, T, D] -> [B, T, D].

    Applying it twice gives x back on real positions, so it also undoes itself.
    """
    positions = torch.arange(x.shape[1], device=x.device)  # [T]
    lengths = mask.sum(dim=1, keepdim=True)  # [B, 1]
    source = torch.where(positions < lengths, lengths - 1 - positions, positions)  # [B, T]
    rows = torch.arange(x.shape[0], device=x.device).unsqueeze(1)  # [B, 1]
    return x[rows, source]  # [B, T, D]


class GRUAttentionClassifier(SequenceClassifier):
    family = "gru_attention"
    attention_kind = "pool"
    config_cls = GRUAttentionConfig
    config: GRUAttentionConfig

    def build(self) -> None:
        d = self.config.d_model
        self.forward_gru = nn.GRU(d, d // 2, batch_first=True)
        self.backward_gru = nn.GRU(d, d // 2, batch_first=True)
        self.norm = nn.LayerNorm(d)
        self.pool = MultiQueryPool(d, self.config.n_queries)

    def reset_weights(self) -> None:
        super().reset_weights()
        for gru in (self.forward_gru, self.backward_gru):
            gru.reset_parameters()  # PyTorch's own uniform init suits recurrent weights

    def features(self, x: Tensor, mask: Tensor, with_attention: bool) -> tuple[Tensor, Tensor]:
        x = x * mask.unsqueeze(-1).to(x.dtype)  # [B, T, D]
        ahead, _ = self.forward_gru(x)  # [B, T, D/2]
        behind, _ = self.backward_gru(reverse_in_place(x, mask))  # [B, T, D/2], reversed rows
        states = torch.cat([ahead, reverse_in_place(behind, mask)], dim=-1)  # [B, T, D]
        pooled, weights = self.pool(self.norm(self.drop(states)), mask)  # [B, D], [B, Q, T]
        if self.config.bag:
            pooled = pooled + masked_mean(x, mask)[0]  # [B, D]
        return self.drop(pooled), weights.mean(dim=1)  # [B, D], [B, T]


def _space(trial: Trial) -> dict[str, Any]:
    return {
        "n_queries": trial.suggest_categorical("n_queries", [1, 2, 4]),
        "ngram_buckets": trial.suggest_categorical("ngram_buckets", [0, 65536]),
    }


FAMILY = Family(GRUAttentionClassifier.family, GRUAttentionClassifier, search=small_space(_space))
