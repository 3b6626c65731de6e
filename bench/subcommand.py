"""What the training subcommands of `python -m bench` share: their parser and its bounds."""

from __future__ import annotations

import argparse
from collections.abc import Mapping


def parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    """`python -m bench NAME`'s parser: the module docstring's first paragraph, defaults in --help."""
    return argparse.ArgumentParser(
        prog=f"python -m bench {name}", description=(doc or "").split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )  # fmt: skip


def require_at_least(
    parser: argparse.ArgumentParser, args: argparse.Namespace, least: Mapping[str, int]
) -> None:
    """Exit with status 2 and one line naming the first flag below its bound."""
    for flag, bound in least.items():
        if getattr(args, flag) < bound:
            parser.error(f"--{flag} must be at least {bound}")
