"""`attnserve-client explain`: a PNG of a text's attention, one panel per layer and head
(query tokens down, key tokens across), the maps picked with --layer/--head, the rollout,
or one strip of pooling weights, with a colour bar; --merge-pieces draws words, not pieces.
With --attribution, a strip of each token's attribution (attribution.py), beside the
attention when attention is asked too."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnserve.service.client.attribution import attribution_panel, merge_scores, strip_inches
from attnserve.service.client.pieces import (
    Word,
    mark_special,
    merge_matrix,
    merge_vector,
    special_flags,
    word_groups,
)
from attnserve.service.common.vocabulary import AttentionKind, AttentionMode, Attribution

_CELL_INCHES = 0.3
_MAPS = (AttentionKind.SELF, AttentionKind.LAYERS)  # kinds with [n, n] maps: layers, heads, a rollout
_ALL, _ROLLOUT = AttentionMode.ALL.word, AttentionMode.ROLLOUT.word


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--layer", type=int, help="draw this layer only, 1 = the first (default: every layer)"
    )
    parser.add_argument("--head", type=int, help="draw this head only, 1 = the first (default: every head)")
    parser.add_argument(
        "--attention",
        choices=[_ALL, _ROLLOUT],
        default=None,
        help="all: the layer x head maps; rollout: one map through every layer (heads averaged) "
        "(default: all, or no attention when only --attribution is asked)",
    )
    parser.add_argument("--rollout", action="store_true", help="the same as --attention rollout")
    parser.add_argument(
        "--merge-pieces", action="store_true", help="merge word pieces into words (sum columns, average rows)"
    )


@dataclass(frozen=True)
class Picture:
    """What to draw: labels, which are special, and [L, H, n, n] maps (or [n] pooling weights)."""

    labels: list[str]
    special: list[bool]
    weights: np.ndarray
    titles: list[list[str]]


def units(result: Any, text: str, merge: bool) -> tuple[list[Word] | None, list[str], list[bool]]:
    """The words (with --merge-pieces) or None, and the labels and special flags to draw."""
    tokens = list(result.tokens)
    offsets, flags = getattr(result, "offsets", ()), getattr(result, "special", ())
    words = word_groups(tokens, text, offsets, flags) if merge else None
    labels = [w.label for w in words] if words else tokens
    special = [w.special for w in words] if words else special_flags(tokens, flags)
    return words, labels, special


def picture(result: Any, text: str, mode: str, layer: int | None, head: int | None, merge: bool) -> Picture:
    weights = np.asarray(result.attention)
    words, labels, special = units(result, text, merge)
    if weights.ndim == 1:
        return Picture(labels, special, merge_vector(weights, words) if words else weights, [])
    if mode == _ROLLOUT:
        weights = weights[None, None]
        titles = [["rollout (every layer, heads averaged)"]]
    else:
        layers = range(weights.shape[0]) if layer is None else [layer - 1]
        heads = range(weights.shape[1]) if head is None else [head - 1]
        weights = weights[np.ix_(list(layers), list(heads))]
        titles = [[f"layer {lay + 1} head {h + 1}" for h in heads] for lay in layers]
    return Picture(labels, special, merge_matrix(weights, words) if words else weights, titles)


def check_pick(info: Any, args: argparse.Namespace) -> str | None:
    """A problem with --layer/--head/--rollout for this model, in words, or None."""
    picked = args.layer is not None or args.head is not None
    if info.attention_kind not in _MAPS and (picked or args.rollout or args.attention == _ROLLOUT):
        return f"model {info.name!r} pools attention into one weight per token: no layers, heads or rollout"
    layers, heads = info.attention_layers, info.attention_heads
    if info.attention_kind == AttentionKind.SELF:
        layers, heads = 1, 1
    if args.layer is not None and not 1 <= args.layer <= layers:
        return f"--layer must be from 1 to {layers} for model {info.name!r}, not {args.layer}"
    if args.head is not None and not 1 <= args.head <= heads:
        return f"--head must be from 1 to {heads} for model {info.name!r}, not {args.head}"
    if picked and (args.rollout or args.attention == _ROLLOUT):
        return "--rollout draws one map through every layer: leave out --layer and --head"
    return None


def pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def attention_inches(tokens: int, weights: np.ndarray) -> tuple[float, float]:
    """The size of the attention's panels (pooled_figure, layers_figure), in inches."""
    if weights.ndim == 1:
        return strip_inches(tokens)
    size = max(2.5, _CELL_INCHES * tokens)
    return size * weights.shape[1] + 1.2, size * weights.shape[0]


def pooled_figure(
    plt: Any, tokens: list[str], weights: np.ndarray, special: Sequence[bool] = (), host: Any = None
) -> tuple[Any, int]:
    """A strip of pooling weights; on `host` (a subfigure) when given, else a figure of its own."""
    if host is None:
        figure, axis = plt.subplots(figsize=attention_inches(len(tokens), weights), layout="constrained")
    else:
        figure, axis = host, host.subplots()
    image = axis.imshow(weights[None, :], cmap="viridis", aspect="auto", vmin=0)
    axis.set_xticks(range(len(tokens)), tokens, rotation=60, ha="right")
    mark_special(axis.get_xticklabels(), special)
    axis.set_yticks([])
    axis.set_xlabel("token")
    axis.set_title("pooling weights", fontsize=9)
    figure.colorbar(image, ax=axis, label="pooling weight", fraction=0.05)
    return figure, 1


def layers_figure(
    plt: Any,
    tokens: list[str],
    weights: np.ndarray,
    titles: Sequence[Sequence[str]] = (),
    special: Sequence[bool] = (),
    host: Any = None,
) -> tuple[Any, int]:
    """One panel per map of `weights` [L, H, n, n]; `titles` per panel (default: layer and head);
    on `host` (a subfigure) when given, else a figure of its own."""
    layers, heads = weights.shape[:2]
    if not titles:
        titles = [[f"layer {lay + 1} head {h + 1}" for h in range(heads)] for lay in range(layers)]
    peak = max(1.0, float(weights.max()))  # merged columns can exceed 1
    if host is None:
        size = attention_inches(len(tokens), weights)
        figure, grid = plt.subplots(layers, heads, figsize=size, squeeze=False, layout="constrained")
    else:
        figure, grid = host, host.subplots(layers, heads, squeeze=False)
    image = None
    for layer in range(layers):
        for head in range(heads):
            axis = grid[layer][head]
            image = axis.imshow(weights[layer, head], cmap="viridis", vmin=0, vmax=peak)
            axis.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=7)
            axis.set_yticks(range(len(tokens)), tokens, fontsize=7)
            mark_special(axis.get_xticklabels(), special)
            mark_special(axis.get_yticklabels(), special)
            axis.set_title(titles[layer][head], fontsize=9)
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
    attributed = args.attribution != Attribution.NONE.word
    picked = args.layer is not None or args.head is not None or args.rollout or args.attention is not None
    attended = picked or not attributed  # only an attribution asked: no attention drawn
    if attended and info.attention_kind == AttentionKind.NONE:
        print(f"attnserve-client: model {info.name!r} has no attention weights to explain", file=sys.stderr)
        return 1
    problem = check_pick(info, args)
    if problem:
        print(f"attnserve-client: {problem}", file=sys.stderr)
        return 2
    mode = _ROLLOUT if args.rollout else args.attention or _ALL
    if info.attention_kind not in _MAPS:
        mode = AttentionMode.POOLED.word
    reply = client.classify(
        [args.text],
        model=args.model,
        version=args.version,
        attention=mode if attended else AttentionMode.NONE.word,
        attribution=args.attribution,
        attribution_budget=args.attribution_budget,
        attribution_label=args.attribution_label,
        long_text=args.long_text,
    )
    result = reply.results[0]
    figure, panels, shown = _figure(plt, result, args, mode, attended)
    score = result.value if result.value is not None else result.probabilities.max()  # regression: the value
    figure.suptitle(f"{reply.model} v{reply.version}: {result.label} ({score:.3f})")
    out = Path(args.out)
    figure.savefig(out, dpi=110)
    plt.close(figure)
    unit = "words" if args.merge_pieces else "tokens"
    print(f"wrote {out} ({panels} panel(s), {shown} {unit}, label {result.label})")
    return 0


def _figure(
    plt: Any, result: Any, args: argparse.Namespace, mode: str, attended: bool
) -> tuple[Any, int, int]:
    """(the figure, its panels, the tokens or words drawn): the attention, the attribution's
    strip, or the two side by side."""
    words, labels, special = units(result, args.text, args.merge_pieces)
    strip, title = None, ""
    if result.attribution is not None:
        strip = merge_scores(result.attribution, words)
        title = f"attribution ({args.attribution}, {result.attribution_rows} forward rows)"
    if not attended:
        assert strip is not None
        figure = plt.figure(figsize=strip_inches(len(labels)), layout="constrained")
        attribution_panel(figure, labels, strip, special, title)
        return figure, 1, len(labels)
    shown = picture(result, args.text, mode, args.layer, args.head, args.merge_pieces)
    host = figure = None
    if strip is not None:  # the attention on the left, the attribution's strip beside it
        left_w, left_h = attention_inches(len(labels), shown.weights)
        right_w, right_h = strip_inches(len(labels))
        figure = plt.figure(figsize=(left_w + right_w, max(left_h, right_h)), layout="constrained")
        host, right = figure.subfigures(1, 2, width_ratios=[left_w, right_w])
        attribution_panel(right, labels, strip, special, title)
    if shown.weights.ndim == 1:
        drawn, panels = pooled_figure(plt, shown.labels, shown.weights, shown.special, host=host)
    else:
        drawn, panels = layers_figure(
            plt, shown.labels, shown.weights, shown.titles, shown.special, host=host
        )
    return (figure or drawn), panels + (strip is not None), len(labels)
