"""`attnserve-export ... --long-texts windows`: the long-text policy a bundle records, how a
server with `--long-text windows` reads a text over the model's max_len (service/bundle/long_texts.py)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from attnserve.export.errors import ExportRequestError
from attnserve.service.bundle import COMBINES, MAX_WINDOWS, LongTexts


def add_long_text_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("long texts", "how --long-text windows reads a text over max_len")
    group.add_argument(
        "--long-texts",
        choices=["windows"],
        default=None,
        help="record a long-text policy in the bundle; unset: the server's default (windows of max_len "
        "sharing a quarter of their text tokens, mean of their logits, 16 at most)",
    )
    group.add_argument("--window", type=int, default=None, help="tokens per window, special tokens included "
                       "(default: max_len)")  # fmt: skip
    group.add_argument(
        "--stride", type=int, default=None,
        help="tokens two neighbouring windows share (default: a quarter of a window's text tokens)",
    )  # fmt: skip
    group.add_argument(
        "--combine", choices=[c for c in COMBINES if c != "head"], default="mean",
        help="mean: the windows' logits averaged; max: the most confident window decides",
    )  # fmt: skip
    group.add_argument("--max-windows", type=int, default=MAX_WINDOWS, help="the most windows of one text")


def long_text_policy(args: argparse.Namespace) -> Callable[[int], LongTexts] | None:
    """The policy --long-texts windows asks for, for a model of a given max_len (known once the
    source is read); a window, stride or combination without it is refused."""
    if args.long_texts is None:
        if args.window is not None or args.stride is not None or args.combine != "mean":
            raise ExportRequestError("--window, --stride and --combine need --long-texts windows")
        return None

    def policy(max_len: int) -> LongTexts:
        window = args.window if args.window is not None else max_len
        stride = args.stride if args.stride is not None else max(0, (window - 2) // 4)
        try:
            return LongTexts(window=window, stride=stride, combine=args.combine, max_windows=args.max_windows)
        except ValueError as exc:
            raise ExportRequestError(f"--long-texts: {' '.join(str(exc).split())}") from None

    return policy
