"""Attention post-processing: one text's weights in the requested mode, padding stripped.

The model's `attention` output per batch is `[B, T]` (kind "pool"), `[B, T, T]` ("self")
or `[B, L, H, T, T]` ("layers"); a text of n real tokens occupies the first n positions.
"self" is treated as one layer with one head. Every function here returns arrays whose
token axes have exactly n entries.
"""

from __future__ import annotations

import numpy as np

from attnserve.service.bundle import AttentionKind, AttentionSpec
from attnserve.service.common.vocabulary import AttentionMode
from attnserve.service.errors import InvalidArgument

_MAP_MODES = (AttentionMode.POOLED, AttentionMode.LAST_LAYER, AttentionMode.ALL, AttentionMode.ROLLOUT)
SUPPORTED: dict[AttentionKind, tuple[AttentionMode, ...]] = {
    AttentionKind.POOL: (AttentionMode.POOLED,),
    AttentionKind.SELF: _MAP_MODES,
    AttentionKind.LAYERS: _MAP_MODES,
    AttentionKind.NONE: (),
}


def mode_shapes(attention_kind: AttentionKind, layers: int, heads: int) -> dict[AttentionMode, str]:
    """Per-text shape of each supported mode, n standing for the text's token count."""
    if attention_kind == AttentionKind.POOL:
        return {AttentionMode.POOLED: "[n]"}
    if attention_kind == AttentionKind.NONE:
        return {}
    layers, heads = (1, 1) if attention_kind == AttentionKind.SELF else (layers, heads)
    return {
        AttentionMode.POOLED: "[n, n]",
        AttentionMode.LAST_LAYER: f"[{heads}, n, n]",
        AttentionMode.ALL: f"[{layers}, {heads}, n, n]",
        AttentionMode.ROLLOUT: "[n, n]",
    }


def check_request(spec: AttentionSpec, mode: AttentionMode, top_k: int, model: str) -> tuple[int, int]:
    """Raise InvalidArgument unless the model can answer this attention request: the one check
    of every front end, so modes are named by their word, as the JSON API, V2 and the client
    write them (attnserve.v1's enum names end in the same word). Else what the reply's attention
    holds per text, for its size: (arrays, axes), float32 arrays of `axes` token axes each ([n]
    has one, [n, n] two); (0, 0) when `mode` asks none."""
    attention_kind = spec.kind
    if mode != AttentionMode.NONE and mode not in SUPPORTED[attention_kind]:
        if attention_kind == AttentionKind.NONE:
            raise InvalidArgument(
                f"attention: model {model!r} has no attention weights; ask for none", field="attention"
            )
        offered = ", ".join(m.word for m in SUPPORTED[attention_kind])
        raise InvalidArgument(
            f"attention: mode {mode.word!r} is not available for model {model!r} "
            f"(attention kind {attention_kind.value!r}); it offers: {offered}",
            field="attention",
        )
    if top_k and attention_kind == AttentionKind.NONE:
        raise InvalidArgument(
            f"top_k: model {model!r} has no attention weights to rank tokens by", field="top_k"
        )
    if mode == AttentionMode.NONE:
        return 0, 0
    if attention_kind == AttentionKind.POOL:
        return 1, 1
    if attention_kind == AttentionKind.SELF or mode in (AttentionMode.POOLED, AttentionMode.ROLLOUT):
        return 1, 2
    return spec.heads * (spec.layers if mode == AttentionMode.ALL else 1), 2


def as_layers(attention: np.ndarray, attention_kind: AttentionKind) -> np.ndarray:
    """View a batch's attention as [B, L, H, T, T] (kind "self" or "layers")."""
    if attention_kind == AttentionKind.SELF:
        b, t, _ = attention.shape
        return attention.reshape(b, 1, 1, t, t)
    return attention


def rollout(layers: np.ndarray) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema, 2020): [L, H, n, n] -> [n, n], rows sum to 1.

    Heads are averaged, the residual connection is modelled as 0.5 * identity, and the
    layers' maps are multiplied from the first layer up.
    """
    n = layers.shape[-1]
    eye = np.eye(n, dtype=np.float32)
    result = eye
    for layer in layers.mean(axis=1):  # [n, n] per layer
        mixed = 0.5 * layer + 0.5 * eye
        mixed /= mixed.sum(axis=-1, keepdims=True)
        result = mixed @ result
    return np.asarray(result, dtype=np.float32)


def extract(
    attention: np.ndarray, attention_kind: AttentionKind, row: int, n: int, mode: AttentionMode
) -> np.ndarray:
    """One text's attention in `mode` from the batch output (already `as_layers` for the kinds
    "self" and "layers")."""
    if attention_kind == AttentionKind.POOL:
        return attention[row, :n]
    text = attention[row, :, :, :n, :n]  # [L, H, n, n]
    if mode == AttentionMode.POOLED:
        return np.asarray(text[-1].mean(axis=0))
    if mode == AttentionMode.LAST_LAYER:
        return np.asarray(text[-1])
    if mode == AttentionMode.ALL:
        return text
    if mode == AttentionMode.ROLLOUT:
        return rollout(text)
    raise ValueError(f"no attention for mode {mode!r}")


def top_k(weights: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and weights of the k largest entries of a [n] vector, largest first."""
    k = min(k, weights.shape[0])
    if k == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    index = np.argpartition(-weights, k - 1)[:k]
    index = index[np.argsort(-weights[index], kind="stable")]
    return index, weights[index]
