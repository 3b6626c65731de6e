"""Small labelled sentence files for the tests of users' data: made here, a few hundred rows."""

from __future__ import annotations

import csv
import random
from pathlib import Path

GOOD = ("good", "great", "fine", "lovely", "superb")
BAD = ("bad", "dull", "awful", "boring", "weak")
NOUNS = ("film", "plot", "cast", "script", "ending")


def sentence(rng: random.Random) -> tuple[str, str]:
    """A short review whose label flips with "not" before the adjective."""
    positive = rng.random() < 0.5
    negated = rng.random() < 0.3
    adjective = rng.choice(GOOD if positive != negated else BAD)
    text = f"the {rng.choice(NOUNS)} was {'not ' if negated else ''}{adjective}"
    if rng.random() < 0.3:
        text += f" and the {rng.choice(NOUNS)} was {rng.choice(NOUNS)}"
    return text, "positive" if positive else "negative"


def write_sentences(path: Path, n: int, seed: int, *, longer_by: int = 0) -> Path:
    """``n`` rows (sentence,label); ``longer_by`` appends that many filler words to each text."""
    rng = random.Random(seed)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["sentence", "label"])
        for _ in range(n):
            text, label = sentence(rng)
            writer.writerow([text + " so it goes" * (longer_by // 3) if longer_by else text, label])
    return path
