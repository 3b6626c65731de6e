"""Transformer encoder classifier: N blocks of multi-head self-attention and MLP, then pooling.

Reads in build order: config, MLP, block, classifier. The default config is the published
car-order model (4 layers, 1 head, d_model 64, MLP ratio 4, learned positions, mean pooling).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnserve.training.models.base import (
    AttentionPool,
    Classifier,
    ModelConfig,
    PositionalEncoding,
    SelfAttention,
    check_inputs,
    make_head,
    masked_mean,
    require,
)
from attnserve.training.models.init import init_for_word_order

NORMS = ("pre", "post")
POSITIONS = ("learned", "sinusoidal")  # an encoder without positions cannot see word order
POOLINGS = ("mean", "cls", "attention")


@dataclass(frozen=True)
class TransformerConfig(ModelConfig):
    n_layers: int = 4
    n_heads: int = 1
    d_model: int = 64
    mlp_ratio: int = 4  # feed-forward width = mlp_ratio * d_model
    norm: str = "pre"  # pre (LayerNorm before each sublayer) | post (after the residual add)
    positions: str = "learned"  # learned | sinusoidal
    pooling: str = "mean"  # mean | cls (first token) | attention
    dropout: float = 0.0  # the car-order runs that reached the target used none
    qk_init_gain: float = 2.0  # query/key weights start at this multiple of PyTorch's default

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_at_least(1, "n_layers", "n_heads", "d_model", "mlp_ratio")
        self.require_positive("qk_init_gain")
        require(
            self.d_model % self.n_heads == 0,
            f"TransformerConfig.d_model={self.d_model} must be divisible by n_heads={self.n_heads}",
        )
        self.require_choice("norm", NORMS)
        self.require_choice("positions", POSITIONS)
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

    def forward(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        if self.pre_norm:
            y, weights = self.attn(self.ln1(x), mask)  # [B, T, D], [B, H, T, T]
            x = x + self.drop(y)  # [B, T, D]
            x = x + self.mlp(self.ln2(x))  # [B, T, D]
        else:
            y, weights = self.attn(x, mask)  # [B, T, D], [B, H, T, T]
            x = self.ln1(x + self.drop(y))  # [B, T, D]
            x = self.ln2(x + self.mlp(x))  # [B, T, D]
        return x, weights


class TransformerClassifier(Classifier):
    family = "transformer"
    attention_kind = "layers"
    config_cls = TransformerConfig
    config: TransformerConfig

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = PositionalEncoding(config.positions, config.max_len, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        # Pre-norm blocks leave the residual stream unnormalised; post-norm ones already end in a norm.
        self.ln_f = nn.LayerNorm(config.d_model) if config.norm == "pre" else nn.Identity()
        self.pool = AttentionPool(config.d_model) if config.pooling == "attention" else None
        self.head = make_head(config.head, config.d_model, config.num_classes)
        init_for_word_order(self, self.embed, self.positions, config.qk_init_gain)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        check_inputs(input_ids, attention_mask, self.config.max_len)
        mask = attention_mask.bool()  # [B, T]
        x = self.drop(self.positions(self.embed(input_ids)))  # [B, T, D]
        layers = []
        for block in self.blocks:
            x, weights = block(x, mask)  # [B, T, D], [B, H, T, T]
            layers.append(weights)
        x = self.ln_f(x)  # [B, T, D]
        if self.pool is not None:
            pooled, _ = self.pool(x, mask)  # [B, D]
        elif self.config.pooling == "cls":
            pooled = x[:, 0]  # [B, D], the [CLS] token the tokenizer puts first
        else:
            pooled, _ = masked_mean(x, mask)  # [B, D]
        return self.head(pooled), torch.stack(layers, dim=1)  # [B, C], [B, L, H, T, T]
