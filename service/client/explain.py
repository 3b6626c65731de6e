"""`attnserve-client explain`: a PNG of a text's attention, one panel per layer and head
(query tokens down, key tokens across) or one strip of pooling weights, with a colour bar."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

_CELL_INCHES = 0.3


def pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def pooled_figure(plt: Any, tokens: list[str], weights: np.ndarray) -> tuple[Any, int]:
    figure, axis = plt.subplots(figsize=(max(4.0, 0.5 * len(tokens)), 2.6), layout="constrained")
    image = axis.imshow(weights[None, :], cmap="viridis", aspect="auto", vmin=0)
    axis.set_xticks(range(len(tokens)), tokens, rotation=60, ha="right")
    axis.set_yticks([])
    axis.set_xlabel("token")
    axis.set_title("pooling weights", fontsize=9)
    figure.colorbar(image, ax=axis, label="pooling weight", fraction=0.05)
    return figure, 1


def layers_figure(plt: Any, tokens: list[str], weights: np.ndarray) -> tuple[Any, int]:
    layers, heads = weights.shape[:2]
    size = max(2.5, _CELL_INCHES * len(tokens))
    figure, grid = plt.subplots(
        layers, heads, figsize=(size * heads + 1.2, size * layers), squeeze=False, layout="constrained"
    )
    image = None
    for layer in range(layers):
        for head in range(heads):
            axis = grid[layer][head]
            image = axis.imshow(weights[layer, head], cmap="viridis", vmin=0, vmax=1)
            axis.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=7)
            axis.set_yticks(range(len(tokens)), tokens, fontsize=7)
            axis.set_title(f"layer {layer + 1} head {head + 1}", fontsize=9)
            if layer == layers - 1:
                axis.set_xlabel("key (attended token)", fontsize=8)
            if head == 0:
                axis.set_ylabel("query (attending token)", fontsize=8)
    figure.colorbar(image, ax=grid.ravel().tolist(), label="attention weight (each row sums to 1)")
    return figure, layers * heads


def explain(client: Any, args: argparse.Namespace) -> int:
    plt = pyplot()
    if plt is None:
        print(
            "attnserve-client: explain needs matplotlib, which this installation lacks: "
            "pip install matplotlib (or attnserve[train])",
            file=sys.stderr,
        )
        return 2
    info = client.model(args.model, args.version)
    if info.attention_kind == "none":
        print(f"attnserve-client: model {info.name!r} has no attention weights to explain", file=sys.stderr)
        return 1
    mode = "all" if info.attention_kind in ("self", "layers") else "pooled"
    reply = client.classify([args.text], model=args.model, version=args.version, attention=mode)
    result = reply.results[0]
    tokens, weights = result.tokens, result.attention
    if weights.ndim == 1:
        figure, panels = pooled_figure(plt, tokens, weights)
    else:
        figure, panels = layers_figure(plt, tokens, weights)
    figure.suptitle(f"{reply.model} v{reply.version}: {result.label} ({result.probabilities.max():.3f})")
    out = Path(args.out)
    figure.savefig(out, dpi=110)
    plt.close(figure)
    print(f"wrote {out} ({panels} panel(s), {len(tokens)} tokens, label {result.label})")
    return 0
