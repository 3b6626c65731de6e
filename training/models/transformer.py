"""Transformer classifier: N blocks of multi-head self-attention and MLP, then pooling.

Reads in build order: config, MLP, block, classifier. The default config is the published
car-order model (4 layers, 1 head, d_model 64, MLP ratio 4, learned positions, mean pooling).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from attnserve.training.models.base import SequenceClassifier
from attnserve.training.models.config import SequenceConfig, require
from attnserve.training.models.families import Family, Trial, small_space
from attnserve.training.models.init import init_for_word_order
from attnserve.training.models.layers import AttentionPool, SelfAttention, masked_mean

NORMS = ("pre", "post")
POOLINGS = ("mean", "cls", "attention")


@dataclass(frozen=True)
class TransformerConfig(SequenceConfig):
    position_kinds: ClassVar[tuple[str, ...]] = ("learned", "sinusoidal")  # without, no word order

    n_layers: int = 4
    n_heads: int = 1
    mlp_ratio: int = 4  # feed-forward width = mlp_ratio * d_model
    norm: str = "pre"  # pre (LayerNorm before each sublayer) | post (after the residual add)
    pooling: str = "mean"  # mean | cls (first token) | attention
    dropout: float = 0.0  # the car-order runs that reached the target used none
    qk_init_gain: float = 2.0  # query/key weights start at this multiple of PyTorch's default

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_at_least(1, "n_layers", "n_heads", "mlp_ratio")
        self.require_positive("qk_init_gain")
        require(
            self.d_model % self.n_heads == 0,
            f"TransformerConfig.d_model={self.d_model} must be divisible by n_heads={self.n_heads}",
        )
        self.require_choice("norm", NORMS)
        self.require_choice("pooling", POOLINGS)


class MLP(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.d_model, config.mlp_ratio * config.d_model)
        self.act = nn.GELU()
        self.proj = nn.Linear(config.mlp_ratio * config.d_model, config.d_model)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        x = self.act(self.fc(x))  # [B, T, mlp_ratio * D]
        y: Tensor = self.drop(self.proj(x))  # [B, T, D]
        return y


class Block(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.pre_norm = config.norm == "pre"
        self.ln1 = nn.LayerNorm(config.d_model)
        self.attn = SelfAttention(config.d_model, config.n_heads, config.d_model, config.dropout)
        self.drop = nn.Dropout(config.dropout)
        self.ln2 = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, mask: Tensor, with_weights: bool) -> tuple[Tensor, Tensor | None]:
        if self.pre_norm:
            y, weights = self.attn(self.ln1(x), mask, with_weights)  # [B, T, D], [B, H, T, T] or None
            x = x + self.drop(y)  # [B, T, D]
            x = x + self.mlp(self.ln2(x))  # [B, T, D]
        else:
            y, weights = self.attn(x, mask, with_weights)  # [B, T, D], [B, H, T, T] or None
            x = self.ln1(x + self.drop(y))  # [B, T, D]
            x = self.ln2(x + self.mlp(x))  # [B, T, D]
        return x, weights


class TransformerClassifier(SequenceClassifier):
    family = "transformer"
    attention_kind = "layers"
    config_cls = TransformerConfig
    config: TransformerConfig

    def build(self) -> None:
        config = self.config
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        # Pre-norm blocks leave the residual stream unnormalised; post-norm ones already end in a norm.
        self.ln_f = nn.LayerNorm(config.d_model) if config.norm == "pre" else nn.Identity()
        self.pool = AttentionPool(config.d_model) if config.pooling == "attention" else None

    def reset_weights(self) -> None:
        init_for_word_order(self, self.embed, self.positions, self.config.qk_init_gain)

    def features(self, x: Tensor, mask: Tensor, with_attention: bool) -> tuple[Tensor, Tensor | None]:
        layers: list[Tensor] = []
        for block in self.blocks:
            x, weights = block(x, mask, with_attention)  # [B, T, D], [B, H, T, T] or None
            if weights is not None:
                layers.append(weights)
        x = self.ln_f(x)  # [B, T, D]
        if self.pool is not None:
            pooled, _ = self.pool(x, mask)  # [B, D]
        elif self.config.pooling == "cls":
            pooled = x[:, 0]  # [B, D], the [CLS] token the tokenizer puts first
        else:
            pooled, _ = masked_mean(x, mask)  # [B, D]
        return pooled, torch.stack(layers, dim=1) if layers else None  # [B, D], [B, L, H, T, T]


def _space(trial: Trial) -> dict[str, Any]:
    return {
        "n_layers": trial.suggest_int("n_layers", 1, 2),
        "n_heads": trial.suggest_categorical("n_heads", [1, 2, 4]),
    }


FAMILY = Family(TransformerClassifier.family, TransformerClassifier, search=small_space(_space))
