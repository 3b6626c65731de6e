"""Pieces every classifier family shares: config, masking, positions, heads, attention layers.

Everything here must export to ONNX with dynamic batch and sequence: shapes are never read
into Python ints that end up in the graph (heads are split with ``unflatten(-1, ...)``),
there is no data-dependent control flow, and masked scores use the dtype's most negative
finite value instead of ``-inf`` so a row with no real token stays finite.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

HEADS = ("linear", "cosine")
POSITIONS = ("none", "learned", "sinusoidal")
COSINE_SCALE_INIT = 10.0  # cosine logits live in [-1, 1]; softmax needs a wider range to be confident

# Field annotation -> accepted Python types (an int is a valid float; a bool is not an int here).
_SCALARS: dict[str, tuple[type[Any], ...]] = {
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "bool": (bool,),
}


def require(condition: bool, message: str) -> None:
    """Raise ValueError(message) unless condition holds (config validation)."""
    if not condition:
        raise ValueError(message)


@dataclass(frozen=True)
class ModelConfig:
    """Fields every family has. Subclasses add their own, all with defaults."""

    vocab_size: int
    num_classes: int = 2
    max_len: int = 64
    pad_id: int = 0
    head: str = "linear"  # linear | cosine
    dropout: float = 0.1

    def __post_init__(self) -> None:
        name = type(self).__name__
        # Configs arrive from checkpoints and command lines, so check types, not only values.
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            allowed = _SCALARS.get(str(f.type))
            if allowed is None:
                continue
            if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
                raise ValueError(f"{name}.{f.name} must be {f.type}, got {value!r}")
            if f.type == "float":
                object.__setattr__(self, f.name, float(value))
        self.require_at_least(2, "vocab_size", "num_classes")
        self.require_at_least(1, "max_len")
        require(
            0 <= self.pad_id < self.vocab_size,
            f"{name}.pad_id must be in [0, vocab_size={self.vocab_size}), got {self.pad_id}",
        )
        self.require_choice("head", HEADS)
        require(0.0 <= self.dropout < 1.0, f"{name}.dropout must be in [0, 1), got {self.dropout}")

    def require_at_least(self, minimum: int, *names: str) -> None:
        for field in names:
            value = getattr(self, field)
            require(value >= minimum, f"{type(self).__name__}.{field} must be >= {minimum}, got {value}")

    def require_positive(self, *names: str) -> None:
        for field in names:
            value = getattr(self, field)
            require(value > 0, f"{type(self).__name__}.{field} must be > 0, got {value}")

    def require_choice(self, field: str, choices: tuple[str, ...]) -> None:
        value = getattr(self, field)
        require(value in choices, f"{type(self).__name__}.{field} must be one of {choices}, got {value!r}")


def check_inputs(input_ids: Tensor, attention_mask: Tensor, max_len: int) -> None:
    """Reject inputs the model cannot read.

    Python-side only: during ONNX export it checks the example inputs and leaves nothing in
    the graph, so whoever feeds an exported model must enforce max_len itself.
    """
    if input_ids.dim() != 2 or input_ids.shape != attention_mask.shape:
        raise ValueError(
            "input_ids and attention_mask must both be [batch, sequence]; got "
            f"{tuple(input_ids.shape)} and {tuple(attention_mask.shape)}"
        )
    if input_ids.shape[1] > max_len:
        raise ValueError(
            f"sequence length {input_ids.shape[1]} exceeds max_len {max_len}; "
            f"truncate inputs to at most {max_len} tokens"
        )


def masked_softmax(scores: Tensor, keep: Tensor) -> Tensor:
    """Softmax over the last axis where positions with keep=False get exactly 0 weight.

    ``keep`` is a bool tensor broadcastable to ``scores``. A row with nothing kept comes out
    all zeros rather than NaN: its scores are all finfo.min, softmax makes them uniform and
    the final multiply zeroes them.
    """
    scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    return scores.softmax(dim=-1) * keep.to(scores.dtype)


def masked_mean(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Average x [B, T, D] over positions where mask [B, T] is True; also return the weights."""
    weights = mask.to(x.dtype)  # [B, T]
    weights = weights / weights.sum(dim=-1, keepdim=True).clamp(min=1.0)  # [B, T], rows sum to 1 (or 0)
    pooled = (weights.unsqueeze(1) @ x).squeeze(1)  # [B, D]
    return pooled, weights


def sinusoids(max_len: int, d_model: int) -> Tensor:
    """The fixed sine/cosine position table [max_len, d_model]: position offsets are linear maps of it."""
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # [L, 1]
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(1e4) / d_model))
    table = torch.zeros(max_len, d_model)  # [L, D]
    table[:, 0::2] = torch.sin(position * freq)
    table[:, 1::2] = torch.cos(position * freq[: d_model // 2])
    return table


class PositionalEncoding(nn.Module):
    """Adds a position vector to each token: learned table, fixed sinusoids, or nothing."""

    def __init__(self, kind: str, max_len: int, d_model: int) -> None:
        super().__init__()
        require(kind in POSITIONS, f"positions must be one of {POSITIONS}, got {kind!r}")
        self.kind = kind
        if kind == "learned":
            self.table = nn.Parameter(torch.randn(max_len, d_model) * 0.02)  # [L, D]
        elif kind == "sinusoidal":
            # Derived from the config, so it is not saved in checkpoints.
            self.register_buffer("table", sinusoids(max_len, d_model), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        if self.kind == "none":
            return x
        positions = torch.arange(x.shape[1], device=x.device)  # [T]
        return x + self.table[positions]  # [B, T, D]


class CosineHead(nn.Module):
    """Logits = scale * cos(features, class weight): insensitive to the features' norm."""

    def __init__(self, in_dim: int, num_classes: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_classes, in_dim) * 0.02)  # [C, D]
        self.scale = nn.Parameter(torch.tensor(COSINE_SCALE_INIT))

    def forward(self, x: Tensor) -> Tensor:
        # normalize clamps the norm, so an all-zero feature row gives zero logits, not NaN.
        return self.scale * F.normalize(x, dim=-1) @ F.normalize(self.weight, dim=-1).T  # [B, C]


def make_head(kind: str, in_dim: int, num_classes: int) -> nn.Module:
    require(kind in HEADS, f"head must be one of {HEADS}, got {kind!r}")
    return nn.Linear(in_dim, num_classes) if kind == "linear" else CosineHead(in_dim, num_classes)


class AttentionPool(nn.Module):
    """One learned query attends over the tokens: scaled dot-product pooling to one vector."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.query = nn.Parameter(torch.randn(d_model) * 0.02)  # [D]
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.scale = 1.0 / math.sqrt(d_model)

    def forward(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        scores = (self.key(x) @ self.query) * self.scale  # [B, T]
        weights = masked_softmax(scores, mask)  # [B, T]
        pooled = (weights.unsqueeze(1) @ self.value(x)).squeeze(1)  # [B, D]
        return pooled, weights


class SelfAttention(nn.Module):
    """Multi-head self-attention written out so the per-head weights can be returned.

    Queries and keys are ``qk_dim`` wide in total (may be narrower than d_model); values and
    the output keep d_model. Weights involving a padded query or key are exactly 0.
    """

    def __init__(self, d_model: int, n_heads: int, qk_dim: int, dropout: float) -> None:
        super().__init__()
        require(d_model % n_heads == 0, f"d_model={d_model} must be divisible by n_heads={n_heads}")
        require(qk_dim % n_heads == 0, f"qk_dim={qk_dim} must be divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.query = nn.Linear(d_model, qk_dim)
        self.key = nn.Linear(d_model, qk_dim)
        self.value = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)
        self.attn_drop = nn.Dropout(dropout)
        self.scale = 1.0 / math.sqrt(qk_dim // n_heads)

    def forward(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        q = self.query(x).unflatten(-1, (self.n_heads, -1)).transpose(1, 2)  # [B, H, T, k/H]
        k = self.key(x).unflatten(-1, (self.n_heads, -1)).transpose(1, 2)  # [B, H, T, k/H]
        v = self.value(x).unflatten(-1, (self.n_heads, -1)).transpose(1, 2)  # [B, H, T, D/H]
        scores = (q @ k.transpose(-2, -1)) * self.scale  # [B, H, T, T]
        keep = mask[:, None, :, None] & mask[:, None, None, :]  # [B, 1, T, T]
        weights = masked_softmax(scores, keep)  # [B, H, T, T]
        y = self.attn_drop(weights) @ v  # [B, H, T, D/H]
        y = y.transpose(1, 2).flatten(2)  # [B, T, D]
        return self.out(y), weights


class Classifier(nn.Module):
    """Base of every family: ``forward(input_ids, attention_mask) -> (logits, attention)``.

    input_ids and attention_mask are int64 [B, T] (mask 1 = real token, right padding);
    logits are [B, C]; attention's shape depends on ``attention_kind``:
    pool [B, T], self [B, T, T], layers [B, L, H, T, T], none -> None.
    """

    family: ClassVar[str]
    attention_kind: ClassVar[str]
    config_cls: ClassVar[type[ModelConfig]]

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if not isinstance(config, self.config_cls):
            raise TypeError(f"{type(self).__name__} needs a {self.config_cls.__name__}, got {config!r}")
        self.config = config

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor | None]:
        raise NotImplementedError
