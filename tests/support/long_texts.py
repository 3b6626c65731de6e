"""Pieces the long-text tests share: labelled files of texts, and a bundle's tokenizer as a
server with `--long-text windows` reads long texts with it."""

from __future__ import annotations

import csv
from pathlib import Path

from attnserve.service.bundle import LongTexts, read_bundle
from attnserve.service.engine.models.tokenization import TextTokenizer


def write_csv(path: Path, rows: list[tuple[str, str]]) -> Path:
    """`rows` of (text, label) as a CSV file with a header, at `path`."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return path


def served_tokenizer(bundle: Path, policy: LongTexts) -> TextTokenizer:
    """The bundle version's tokenizer cutting texts of any length into `policy`'s windows."""
    manifest = read_bundle(bundle).manifest
    return TextTokenizer(
        bundle / "tokenizer.json",
        manifest.max_len,
        reject_long=False,
        max_text_chars=1 << 20,
        truncation=manifest.truncation,
        windows=policy,
    )
