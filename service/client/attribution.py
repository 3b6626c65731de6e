"""Attributions in `attnserve-client`: the flags of classify and explain, and explain's
strip of tokens coloured by their score on a diverging map (red: the word raises the
probability of the label the reply names, blue: it lowers it, white: no effect)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import numpy as np

from attnserve.service.client.pieces import Word, mark_special
from attnserve.service.common.vocabulary import Attribution

_CMAP = "RdBu_r"  # diverging, white at 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--attribution",
        default=Attribution.NONE.word,
        choices=Attribution.words(),
        help="also score each word by what it does to the label's probability: occlusion (each word "
        "removed in turn) or shapley (KernelSHAP over the words)",
    )
    parser.add_argument(
        "--attribution-budget",
        type=int,
        default=0,
        help="shapley: forward rows per text (0 = the server's default, 64)",
    )
    parser.add_argument(
        "--attribution-label",
        default="",
        metavar="NAME",
        help="the label whose score the attribution explains (default: each text's own label; a "
        "multi-label model scores each label on its own)",
    )


def merge_scores(scores: np.ndarray, words: Sequence[Word] | None) -> np.ndarray:
    """[n] -> [words]: the pieces of a word carry its score, so a word takes their mean."""
    if not words:
        return scores
    return np.asarray([scores[w.indices].mean() for w in words], dtype=scores.dtype)


def strip_inches(count: int) -> tuple[float, float]:
    """The size of a strip of `count` tokens, in inches (width, height)."""
    return max(4.0, 0.5 * count), 2.6


def attribution_panel(
    host: Any,
    labels: Sequence[str],
    scores: np.ndarray,
    special: Sequence[bool],
    title: str,
) -> None:
    """One strip of `scores` [n] under `labels` on `host` (a figure or a subfigure)."""
    axis = host.subplots()
    peak = float(np.abs(scores).max()) if scores.size else 0.0
    peak = peak if peak > 0 else 1.0  # all zero: any symmetric range draws white
    image = axis.imshow(scores[None, :], cmap=_CMAP, aspect="auto", vmin=-peak, vmax=peak)
    axis.set_xticks(range(len(labels)), labels, rotation=60, ha="right")
    mark_special(axis.get_xticklabels(), special)
    axis.set_yticks([])
    axis.set_xlabel("token")
    axis.set_title(title, fontsize=9)
    bar = host.colorbar(image, ax=axis, fraction=0.05)
    bar.set_label("+ for the label, - against", fontsize=9)
