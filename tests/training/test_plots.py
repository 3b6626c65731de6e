"""The run's attention picture: a panel per head for small models, a panel per layer (its
heads' mean) past MAX_PANELS, and at most MAX_LABELS tokens named along an axis."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from attnserve.training.report.plots import (
    MAX_LABELS,
    MAX_PANELS,
    attention_panels,
    axis_names,
    plot_attention,
)

RNG = np.random.default_rng(0)


def _png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])  # the IHDR chunk
    return width, height


def test_a_small_model_gets_a_panel_per_head() -> None:
    attention = RNG.random((2, 2, 5, 5))
    panels = attention_panels(attention)
    assert [title for title, _ in panels] == [
        "layer 1 head 1", "layer 1 head 2", "layer 2 head 1", "layer 2 head 2",
    ]  # fmt: skip
    np.testing.assert_array_equal(panels[2][1], attention[1, 0])
    ((_, weights),) = attention_panels(RNG.random(7))  # pooling weights [T]: one row
    assert weights.shape == (1, 7)


def test_a_base_sized_encoder_gets_a_panel_per_layer_of_its_heads_mean(tmp_path: Path) -> None:
    layers, heads, tokens = 12, 12, 80
    assert layers * heads > MAX_PANELS
    attention = RNG.random((layers, heads, tokens, tokens))
    panels = attention_panels(attention)
    assert [title for title, _ in panels] == [f"layer {i}, mean of 12 heads" for i in range(1, 13)]
    np.testing.assert_allclose(panels[4][1], attention[4].mean(axis=0))
    names = [f"piece{i}" for i in range(tokens)]
    samples = [("positive", names, attention), ("negative", names, attention)]
    path = plot_attention(samples, tmp_path / "a.png", "t")
    assert path is not None
    width, height = _png_size(path)
    # 12 panels of 2.8 inches at 110 dpi (and a margin), not 144
    assert width <= round((2.8 * layers + 1) * 110) and height <= round((2.6 * 2 + 0.6) * 110)
    ticks, named = axis_names(names)  # 80 tokens: every third is named
    assert list(ticks) == list(range(0, 80, 3)) and named == names[::3] and len(named) <= MAX_LABELS
    assert axis_names(names[:MAX_LABELS]) == (range(MAX_LABELS), names[:MAX_LABELS])  # short: all
    assert axis_names([]) == (range(0), [])


def test_no_samples_no_picture(tmp_path: Path) -> None:
    assert plot_attention([], tmp_path / "a.png", "t") is None
    assert not (tmp_path / "a.png").exists()
