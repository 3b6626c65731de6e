"""Attention post-processing on hand-made weights (numpy only)."""

from __future__ import annotations

import numpy as np
import pytest

from attnserve.service.bundle import AttentionKind, AttentionSpec
from attnserve.service.common.vocabulary import AttentionMode
from attnserve.service.common.weights import importance
from attnserve.service.engine.request.attention import (
    SUPPORTED,
    as_layers,
    check_request,
    extract,
    rollout,
    top_k,
)


def _rows(rng: np.random.Generator, *shape: int) -> np.ndarray:
    weights = rng.random(shape, dtype=np.float32)
    rows: np.ndarray = weights / weights.sum(axis=-1, keepdims=True)
    return rows


def test_rollout_of_one_layer_mixes_in_the_residual() -> None:
    layer = np.array([[[[0.0, 1.0], [1.0, 0.0]]]], dtype=np.float32)  # [L=1, H=1, 2, 2]
    np.testing.assert_allclose(rollout(layer), [[0.5, 0.5], [0.5, 0.5]])


def test_rollout_multiplies_layers_bottom_up_and_keeps_rows_stochastic() -> None:
    rng = np.random.default_rng(0)
    layers = _rows(rng, 3, 2, 5, 5)
    result = rollout(layers)
    eye = np.eye(5, dtype=np.float32)
    expected = eye
    for layer in layers:
        mixed = 0.5 * layer.mean(axis=0) + 0.5 * eye
        expected = mixed @ expected
    np.testing.assert_allclose(result, expected, rtol=1e-5)
    np.testing.assert_allclose(result.sum(axis=-1), 1.0, rtol=1e-5)


def test_extract_strips_padding_per_mode() -> None:
    rng = np.random.default_rng(1)
    batch = _rows(rng, 2, 3, 2, 6, 6)  # [B, L, H, T, T]
    n = 4
    assert extract(batch, AttentionKind.LAYERS, 1, n, AttentionMode.ALL).shape == (3, 2, n, n)
    np.testing.assert_array_equal(
        extract(batch, AttentionKind.LAYERS, 1, n, AttentionMode.LAST_LAYER), batch[1, -1, :, :n, :n]
    )
    np.testing.assert_allclose(
        extract(batch, AttentionKind.LAYERS, 1, n, AttentionMode.POOLED), batch[1, -1, :, :n, :n].mean(axis=0)
    )
    assert extract(batch, AttentionKind.LAYERS, 0, n, AttentionMode.ROLLOUT).shape == (n, n)
    single = _rows(rng, 2, 6, 6)  # "self": [B, T, T]
    assert extract(
        as_layers(single, AttentionKind.SELF), AttentionKind.SELF, 0, 3, AttentionMode.ALL
    ).shape == (1, 1, 3, 3)
    pooled = _rows(rng, 2, 6)
    np.testing.assert_array_equal(
        extract(pooled, AttentionKind.POOL, 1, 5, AttentionMode.POOLED), pooled[1, :5]
    )


@pytest.mark.parametrize("shape", [(5,), (5, 5), (2, 5, 5), (3, 2, 5, 5)])
def test_importance_is_a_distribution_over_tokens(shape: tuple[int, ...]) -> None:
    weights = _rows(np.random.default_rng(2), *shape)
    result = importance(weights)
    assert result.shape == (5,)
    assert result.sum() == pytest.approx(1.0, abs=1e-5)


def test_top_k_orders_by_weight_and_caps_at_length() -> None:
    index, weight = top_k(np.array([0.1, 0.4, 0.2, 0.3], dtype=np.float32), 3)
    assert index.tolist() == [1, 3, 2]
    np.testing.assert_allclose(weight, [0.4, 0.3, 0.2])
    assert top_k(np.array([1.0], dtype=np.float32), 5)[0].tolist() == [0]


@pytest.mark.parametrize("kind", [AttentionKind.POOL, AttentionKind.SELF, AttentionKind.LAYERS])
def test_the_reply_size_a_request_is_checked_for_is_what_extraction_returns(kind: AttentionKind) -> None:
    """check_request's (arrays, axes) per text bound the reply's attention: for one text of n
    tokens, exactly the float32 bytes `extract` hands the reply in each mode the kind offers."""
    spec = AttentionSpec(kind=kind, layers=3, heads=2)
    n = 5
    output = {
        AttentionKind.POOL: _rows(np.random.default_rng(2), 1, n),
        AttentionKind.SELF: as_layers(_rows(np.random.default_rng(3), 1, n, n), AttentionKind.SELF),
        AttentionKind.LAYERS: _rows(np.random.default_rng(4), 1, 3, 2, n, n),
    }[kind]
    assert check_request(spec, AttentionMode.NONE, 3, "m") == (0, 0)  # top tokens only: no map
    for mode in SUPPORTED[kind]:
        arrays, axes = check_request(spec, mode, 0, "m")
        assert extract(output, kind, 0, n, mode).nbytes == 4 * arrays * n**axes, mode
