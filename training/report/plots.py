"""Pictures people look at: training curves and attention heatmaps (PNG)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: runs in CI and containers without a display
import matplotlib.pyplot as plt
import numpy as np


def plot_curves(epochs: Sequence[dict[str, Any]], path: Path, title: str) -> Path:
    x = [row["epoch"] for row in epochs]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax_loss.plot(x, [r["train_loss"] for r in epochs], label="train (running)")
    ax_loss.plot(x, [r["val_loss"] for r in epochs], label="validation")
    ax_loss.set_xlabel("epoch")
    multi = bool(epochs) and "val_micro_f1" in epochs[0]  # multi-label: F1 and exact match, not accuracy
    ax_loss.set_ylabel("binary cross-entropy" if multi else "cross-entropy")
    ax_loss.legend()
    if multi:
        ax_acc.plot(x, [r["train_exact_match"] for r in epochs], label="train exact match (running)")
        ax_acc.plot(x, [r["val_micro_f1"] for r in epochs], label="validation micro-F1")
        ax_acc.plot(x, [r["val_exact_match"] for r in epochs], label="validation exact match", linestyle=":")
    else:
        ax_acc.plot(x, [r["train_accuracy"] for r in epochs], label="train (running)")
        ax_acc.plot(x, [r["val_accuracy"] for r in epochs], label="validation")
    ax_acc.plot(x, [r["val_macro_f1"] for r in epochs], label="validation macro-F1", linestyle="--")
    ax_acc.set_ylim(0.0, 1.02)
    ax_acc.set_xlabel("epoch")
    ax_acc.legend(loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# A text's picture has at most this many panels: more heads than that are drawn as each
# layer's mean over its heads (the explorer's model view shows every head).
MAX_PANELS = 8
# Tokens named along an axis: past this, every k-th is named (more would overlap at 6 pt).
MAX_LABELS = 32


def _as_grid(attention: np.ndarray) -> np.ndarray:
    """Any family's per-text attention as [layers, heads, rows, T] for one grid of panels."""
    if attention.ndim == 1:  # pooling weights [T]
        return attention[None, None, None, :]
    if attention.ndim == 2:  # one self-attention map [T, T]
        return attention[None, None]
    return attention  # layer by layer (transformer, encoder): [L, H, T, T]


def attention_panels(attention: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """(title, [rows, T] map) per panel: every head, or each layer's mean over its heads."""
    grid = _as_grid(attention)
    layers, heads = grid.shape[:2]
    if layers * heads <= MAX_PANELS:
        return [
            (f"layer {li + 1} head {hi + 1}", grid[li, hi]) for li in range(layers) for hi in range(heads)
        ]
    return [(f"layer {li + 1}, mean of {heads} heads", grid[li].mean(axis=0)) for li in range(layers)]


def axis_names(tokens: Sequence[str]) -> tuple[range, list[str]]:
    """The positions named along an axis and their tokens: all, or every k-th past MAX_LABELS."""
    step = max(1, -(-len(tokens) // MAX_LABELS))  # an empty text names nothing
    return range(0, len(tokens), step), list(tokens[::step])


def plot_attention(
    samples: Sequence[tuple[str, list[str], np.ndarray]], path: Path, title: str
) -> Path | None:
    """One row of panels per (label, tokens, attention) sample; layered attention gets a panel
    per head (or per layer, see MAX_PANELS)."""
    if not samples:
        return None
    rows = [(label, tokens, attention_panels(att)) for label, tokens, att in samples]
    cols = len(rows[0][2])
    fig, axes = plt.subplots(len(rows), cols, figsize=(2.8 * cols + 1, 2.6 * len(rows) + 0.6), squeeze=False)
    for r, (label, tokens, panels) in enumerate(rows):
        ticks, names = axis_names(tokens)
        for c, (heading, panel) in enumerate(panels):
            ax = axes[r][c]
            ax.imshow(panel, cmap="viridis", aspect="auto", vmin=0.0)
            ax.set_xticks(ticks, names, rotation=90, fontsize=6)
            # the rows are the same tokens in every panel of a text: named once, on the left
            if c == 0 and panel.shape[0] == len(tokens):
                ax.set_yticks(ticks, names, fontsize=6)
            else:
                ax.set_yticks([])
            if r == 0 and cols > 1:
                ax.set_title(heading, fontsize=8)
            if c == 0:
                ax.set_ylabel(label, fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_confusion(reports: dict[str, dict[str, Any]], path: Path, title: str) -> Path | None:
    """One confusion-matrix panel per evaluated split: counts, coloured by share of the true class.
    None (no picture) for multi-label reports, which have no confusion matrix."""
    if not reports or any("confusion" not in report for report in reports.values()):
        return None
    n = len(reports)
    size = max(len(next(iter(reports.values()))["labels"]), 2)
    fig, axes = plt.subplots(1, n, figsize=(0.7 * size * n + 2.5 * n, 0.7 * size + 2.2), squeeze=False)
    for ax, (split, report) in zip(axes[0], reports.items(), strict=True):
        counts = np.asarray(report["confusion"], dtype=np.float64)  # [C, C], row = true class
        shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0)
        image = ax.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
        labels = report["labels"]
        ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.set_xlabel("predicted")
        ax.set_ylabel("true")
        for (i, j), count in np.ndenumerate(counts):
            ax.text(j, i, f"{int(count)}", ha="center", va="center", fontsize=8,
                    color="white" if shares[i, j] > 0.5 else "black")
        heading = f"{split}: accuracy {report['accuracy']:.3f}, macro-F1 {report['macro_f1']:.3f}"
        ax.set_title(heading, fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="share of the true class")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
