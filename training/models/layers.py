"""Layers the families are built from: masking, positions, heads, the bigram bag and the attention layers.

Everything here must export to ONNX with dynamic batch and sequence: shapes are never read
into Python ints that end up in the graph (heads are split with ``unflatten(-1, ...)``),
there is no data-dependent control flow, and masked scores use the dtype's most negative
finite value instead of ``-inf`` so a row with no real token stays finite.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnserve.training.models.config import HEADS, POSITIONS, require

COSINE_SCALE_INIT = 10.0  # cosine logits live in [-1, 1]; softmax needs a wider range to be confident


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
    """Multi-head self-attention with two paths that give the same output.

    ``with_weights=True`` writes the attention out so the per-head weights can be returned
    (export, attention plots); weights involving a padded query or key are exactly 0.
    ``with_weights=False`` calls the fused ``scaled_dot_product_attention`` kernel, which never
    materialises the [B, H, T, T] weights: the path for training and scoring.
    Queries and keys are ``qk_dim`` wide in total (may be narrower than d_model); values and
    the output keep d_model.
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

    def forward(self, x: Tensor, mask: Tensor, with_weights: bool = True) -> tuple[Tensor, Tensor | None]:
        q = self.query(x).unflatten(-1, (self.n_heads, -1)).transpose(1, 2)  # [B, H, T, k/H]
        k = self.key(x).unflatten(-1, (self.n_heads, -1)).transpose(1, 2)  # [B, H, T, k/H]
        v = self.value(x).unflatten(-1, (self.n_heads, -1)).transpose(1, 2)  # [B, H, T, D/H]
        if with_weights:
            scores = (q @ k.transpose(-2, -1)) * self.scale  # [B, H, T, T]
            keep = mask[:, None, :, None] & mask[:, None, None, :]  # [B, 1, T, T]
            weights: Tensor | None = masked_softmax(scores, keep)  # [B, H, T, T]
            y = self.attn_drop(weights) @ v  # [B, H, T, D/H]
        else:
            # A row without real tokens may attend to its padding: with no key at all the
            # kernel returns NaN, which 0-weight pooling would still propagate.
            empty = ~mask.any(dim=-1)  # [B]
            keys = (mask | empty[:, None])[:, None, None, :]  # [B, 1, 1, T]
            p = self.attn_drop.p if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keys, dropout_p=p, scale=self.scale)
            y = y * mask[:, None, :, None]  # [B, H, T, D/H]: padded queries read 0, as written out
            weights = None
        y = y.transpose(1, 2).flatten(2)  # [B, T, D]
        return self.out(y), weights


class NgramBag(nn.Module):
    """Mean of hashed bigram embeddings over a text's adjacent real-token pairs: [B, T] -> [B, D].

    Each pair of ids hashes into one of ``buckets`` rows, so unseen pairs still get a vector
    (shared with others) and the table's size does not grow with the data. A text with fewer
    than two real tokens gets the zero vector.
    """

    PRIME = 1_000_003  # times an id below 2**31, plus another, stays far inside int64

    def __init__(self, buckets: int, d_model: int) -> None:
        super().__init__()
        self.buckets = buckets
        self.embed = nn.Embedding(buckets, d_model)

    def forward(self, input_ids: Tensor, mask: Tensor) -> Tensor:
        pairs = mask[:, :-1] & mask[:, 1:]  # [B, T-1], both tokens real
        codes = (input_ids[:, :-1] * self.PRIME + input_ids[:, 1:]) % self.buckets  # [B, T-1]
        return masked_mean(self.embed(codes), pairs)[0]  # [B, D]


class MultiQueryPool(nn.Module):
    """``n_queries`` learned queries; query q pools slice q of the values: [B, T, D] -> [B, D]."""

    def __init__(self, d_model: int, n_queries: int) -> None:
        super().__init__()
        self.n_queries = n_queries
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.queries = nn.Parameter(torch.randn(n_queries, d_model // n_queries) * 0.02)  # [Q, D/Q]
        self.scale = 1.0 / math.sqrt(d_model // n_queries)

    def forward(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        keys = self.key(x).tanh().unflatten(-1, (self.n_queries, -1))  # [B, T, Q, D/Q]
        scores = (keys * self.queries).sum(-1).transpose(1, 2) * self.scale  # [B, Q, T]
        weights = masked_softmax(scores, mask[:, None, :])  # [B, Q, T]
        values = self.value(x).unflatten(-1, (self.n_queries, -1)).transpose(1, 2)  # [B, Q, T, D/Q]
        pooled = (weights.unsqueeze(2) @ values).squeeze(2).flatten(1)  # [B, D]
        return pooled, weights
