"""The flags of `attnserve-train --long-texts windows` and the settings they make.

The windows are those of `attnserve-export --long-texts windows` (export/long_texts_cli.py):
--window tokens (special tokens included, default the model's max_len), neighbours sharing
--stride tokens (default a quarter of a window's text tokens), at most --max-windows a text.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from attnserve.service.bundle import MAX_WINDOWS, LongTexts
from attnserve.training.cli.exits import UsageError


@dataclass(frozen=True)
class LongTextSettings:
    window: int | None = None  # None: the model's max_len
    stride: int | None = None  # None: (window - 2) // 4, as LongTexts.default
    max_windows: int = MAX_WINDOWS
    # Padded window tokens of one optimisation step (whole texts up to it); 0: batch_size x window.
    step_tokens: int = 0

    def policy(self, max_len: int) -> LongTexts:
        """The windows for a model of `max_len` tokens; a window over it is refused."""
        window = max_len if self.window is None else self.window
        stride = max(0, (window - 2) // 4) if self.stride is None else self.stride
        try:
            policy = LongTexts(window=window, stride=stride, max_windows=self.max_windows)
            policy.check(max_len)
        except ValueError as exc:
            raise UsageError(f"--long-texts windows: {' '.join(str(exc).split())}") from None
        return policy

    def budget(self, batch_size: int, window: int) -> int:
        return self.step_tokens or batch_size * window


def add_long_text_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group(
        "long texts", "whole long texts, cut into windows as a server with --long-text windows cuts them"
    )
    g.add_argument(
        "--long-texts",
        choices=["windows"],
        default=None,
        help="windows: every text is cut into overlapping windows, the label is the text's and the "
        "loss is on the mean of its windows' logits; the run records the long-text policy that "
        "scored best on validation (truncate, mean, max) for attnserve-export",
    )
    g.add_argument(
        "--window",
        type=int,
        default=None,
        help="tokens per window, special tokens included (default: max_len)",
    )
    g.add_argument(
        "--stride",
        type=int,
        default=None,
        help="tokens two neighbouring windows share (default: a quarter of a window's text tokens)",
    )
    g.add_argument(
        "--max-windows",
        type=int,
        default=MAX_WINDOWS,
        help=f"the most windows of one text; a longer text is skipped in training and evaluation, as "
        f"a server refuses it (default: {MAX_WINDOWS})",
    )
    g.add_argument(
        "--step-tokens",
        type=int,
        default=0,
        help="padded window tokens of one optimisation step, whole texts packed up to it "
        "(default 0: --batch-size x window)",
    )


def long_text_settings(ns: argparse.Namespace) -> LongTextSettings | None:
    """The settings asked for, or None without --long-texts; the combinations that make no sense
    are refused by name before any data is read."""
    given = [f"--{n.replace('_', '-')}" for n in ("window", "stride") if getattr(ns, n) is not None]
    if ns.max_windows != MAX_WINDOWS:
        given.append("--max-windows")
    if ns.step_tokens:
        given.append("--step-tokens")
    if ns.long_texts is None:
        if given:
            raise UsageError(f"{', '.join(given)} need --long-texts windows")
        return None
    refused = {
        "--multi-label": getattr(ns, "multi_label", False),
        "--resume": getattr(ns, "resume", False),
        "--init-embeddings": getattr(ns, "init_embeddings", None) is not None,
        "--pad-to-max-len": getattr(ns, "pad_to_max_len", False),
    }
    for flag, used in refused.items():
        if used:
            raise UsageError(
                f"--long-texts windows trains one softmax over a text's windows from the start; it does "
                f"not take {flag}"
            )
    if ns.data is None:
        raise UsageError("--long-texts windows trains on your long texts: give --data FILE")
    if ns.max_windows < 1 or ns.step_tokens < 0:
        raise UsageError("--max-windows must be at least 1 and --step-tokens 0 or more")
    settings = LongTextSettings(
        window=ns.window, stride=ns.stride, max_windows=ns.max_windows, step_tokens=ns.step_tokens
    )
    if ns.window is not None:  # a window and stride that can never fit are refused now, not after the data
        settings.policy(ns.window)
    return settings
