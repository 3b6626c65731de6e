"""Long texts read whole, as `attnserve-client` shows them: the `--long-text` flag, a strip
of window weights under a text read as several windows (one cell per window, shaded on a
terminal, a block character elsewhere; each window's span, weight and top score on a line,
with an occlusion its drop),
the windows in `--json`, and a model's long-text policy in the models table."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.console import Console
from rich.text import Text

from attnserve.service.client.messages import TextResult, TextWindow
from attnserve.service.common.model_info import ModelInfo

LONG_TEXTS = ("truncate", "reject", "windows")
_BLOCKS = " ▁▂▃▄▅▆▇█"  # a weight of 0 is a blank cell; any other at least ▁
_BAR_WIDTH = 10
_EXCERPT = 40
_COMBINE = {
    "mean": "the mean of their logits decides",
    "max": "the most confident window decides",
    "head": "a document head weighs them",
}


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--long-text",
        default="",
        choices=LONG_TEXTS,
        help="a text over the model's max_len: cut it (truncate), refuse it (reject) or read it whole "
        "as overlapping windows (windows; a file's rows gain `window` and `windows` columns) "
        "(default: the server's --long-text)",
    )


def decisive(windows: Sequence[TextWindow]) -> TextWindow:
    """The window with the largest weight (the first of equals)."""
    return max(windows, key=lambda w: w.weight)


def windows_document(result: TextResult) -> dict[str, Any]:
    """`windows` for `classify --json`: present when the call read windows (one where the text fits)."""
    if not result.windows:
        return {}
    return {
        "windows": [
            {
                "start": w.start,
                "end": w.end,
                "probabilities": w.probabilities.tolist(),
                "weight": w.weight,
                **({"attribution": w.attribution} if w.attribution is not None else {}),  # occlusion
            }
            for w in result.windows
        ]
    }


def _levels(windows: Sequence[TextWindow]) -> list[float]:
    peak = max((w.weight for w in windows), default=0.0)
    return [w.weight / peak if peak > 0 else 0.0 for w in windows]


def _block(level: float) -> str:
    return _BLOCKS[int(np.ceil(level * (len(_BLOCKS) - 1)))]


def _shade(level: float) -> str:
    """Blue, darker for a heavier window (attention keeps its own reds)."""
    fade = int(235 - 170 * level)
    ink = "white" if level > 0.6 else "black"
    return f"{ink} on rgb({fade},{fade + 10},255)"


def _top(window: TextWindow, labels: Sequence[str]) -> str:
    if window.probabilities.size == 0:  # a regression model's windows carry no probabilities
        return "-"
    best = int(window.probabilities.argmax())
    name = labels[best] if best < len(labels) else str(best)
    return f"{name} {float(window.probabilities[best]):.4f}"


def _excerpt(text: str, window: TextWindow) -> str:
    part = " ".join(text[window.start : window.end].split())
    return part if len(part) <= _EXCERPT else part[: _EXCERPT - 3] + "..."


def print_windows(
    out: Console, text: str, result: TextResult, labels: Sequence[str], combine: str = ""
) -> None:
    """Under a text read as several windows: the strip, then a line per window."""
    windows = result.windows
    if len(windows) < 2:
        return
    how = _COMBINE.get(combine, "their weights say how much each counts")
    out.print(f"read as {len(windows)} windows ({how}); weight of each window:", highlight=False)
    levels = _levels(windows)
    strip = Text("  ")
    if out.is_terminal:
        for i, level in enumerate(levels):
            strip.append(f" {i + 1} ", style=_shade(level))
    else:
        strip.append("|" + "".join(_block(level) for level in levels) + "|")
    out.print(strip)
    uneven = len({round(w.weight, 6) for w in windows}) > 1
    top = decisive(windows)
    width = len(str(len(windows)))
    span_width = max(len(f"{w.start}:{w.end}") for w in windows)
    for i, (window, level) in enumerate(zip(windows, levels, strict=True)):
        bar = "█" * round(level * _BAR_WIDTH)
        mark = "  <- decides" if uneven and window is top else ""
        # With occlusion: the text's drop in the explained label's probability without this window.
        drop = "" if window.attribution is None else f"  drop {window.attribution:+.4f}"
        out.print(
            f"  #{i + 1:<{width}}  {f'{window.start}:{window.end}':<{span_width}}  {window.weight:.3f} "
            f'{bar:<{_BAR_WIDTH}}  {_top(window, labels)}{drop}  "{_excerpt(text, window)}"{mark}',
            highlight=False,
        )


def policy_text(info: ModelInfo) -> str:
    """The models table's cell: the server's default and the windows policy,
    e.g. "truncate; windows of 16 (stride 4, mean, at most 16)"."""
    default = info.limits.long_text or "-"
    w = info.windows
    if w is None:
        return default
    return f"{default}; windows of {w.window} (stride {w.stride}, {w.combine}, at most {w.max_windows})"
