"""New training texts for the teacher to label, after Tang et al. (2019), section 3.

Each augmented copy of a text goes word by word: with ``p_mask`` a word becomes a mask,
else with ``p_swap`` it becomes another word of its kind; then with ``p_ngram`` only an
n-gram of the result is kept (n drawn from 1..5). The teacher labels these texts and the
student learns its logits on them: they cover the space around the training texts, where
the gold labels say nothing.

Tang et al. swap a word for one of the same part of speech; without a tagger, a word here is
swapped for one that filled the same slot elsewhere in the training texts (the same word
before and after it), drawn by how often it did: words substitutable in a seen context
share a syntactic (often a semantic) class, which is what the tag stood for. A word whose
slot no other word filled stays. A mask is the teacher's own ``[MASK]`` where its
tokenizer has one (a BERT teacher was pretrained on those), ``[UNK]`` otherwise and for the
student, whose tokenizer maps ``[UNK]`` to its unknown id.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

UNK = "[UNK]"
EDGE = ""  # the neighbour of a text's first and last word
MAX_N = 5


@dataclass(frozen=True)
class AugmentConfig:
    copies: int = 1  # augmented texts per training text
    p_mask: float = 0.1
    p_swap: float = 0.1
    p_ngram: float = 0.25
    seed: int = 0

    def __post_init__(self) -> None:
        if self.copies < 0:
            raise ValueError(f"--augment must be >= 0 copies per text, got {self.copies}")
        for name in ("p_mask", "p_swap", "p_ngram"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")


@dataclass(frozen=True)
class Augmented:
    student: list[str]  # masks written [UNK]
    teacher: list[str]  # the same texts, masks written the teacher's way


def _slots(texts: Sequence[list[str]]) -> dict[tuple[str, str], list[str]]:
    """Every (word before, word after) context -> the words seen in it, once per occurrence."""
    slots: dict[tuple[str, str], list[str]] = defaultdict(list)
    for words in texts:
        for i, word in enumerate(words):
            before = words[i - 1].lower() if i else EDGE
            after = words[i + 1].lower() if i + 1 < len(words) else EDGE
            slots[(before, after)].append(word)
    return slots


def _swap(word: str, filled: list[str], rng: random.Random, tries: int = 8) -> str:
    """Another word of ``filled`` (one entry per occurrence, so drawn by frequency), else ``word``."""
    for _ in range(tries if len(filled) > 1 else 0):
        other = filled[rng.randrange(len(filled))]
        if other != word:
            return other
    return word


def augment_texts(texts: Sequence[str], cfg: AugmentConfig, teacher_mask: str = UNK) -> Augmented:
    """``cfg.copies`` augmented texts per text (duplicates of an original or of each other dropped)."""
    rng = random.Random(f"distill-augment/{cfg.seed}")
    split = [t.split() for t in texts]
    slots = _slots(split)
    seen = set(texts)
    student: list[str] = []
    teacher: list[str] = []
    for words in split:
        if not words:
            continue
        for _ in range(cfg.copies):
            out: list[str | None] = []  # None: a mask
            for i, word in enumerate(words):
                draw = rng.random()
                if draw < cfg.p_mask:
                    out.append(None)
                elif draw < cfg.p_mask + cfg.p_swap:
                    before = words[i - 1].lower() if i else EDGE
                    after = words[i + 1].lower() if i + 1 < len(words) else EDGE
                    out.append(_swap(word, slots.get((before, after), []), rng))
                else:
                    out.append(word)
            if rng.random() < cfg.p_ngram:
                n = rng.randint(1, min(MAX_N, len(out)))
                start = rng.randrange(len(out) - n + 1)
                out = out[start : start + n]
            text = " ".join(UNK if w is None else w for w in out)
            if text in seen:
                continue
            seen.add(text)
            student.append(text)
            teacher.append(" ".join(teacher_mask if w is None else w for w in out))
    return Augmented(student, teacher)
