"""Examples, datasets and the group-aware split shared by every data source."""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

_WORD = re.compile(r"\w+")
# The ``label`` of a multi-label row: its labels are its ``tags`` (training/data/multi_label.py).
TAGGED = -1


class DataError(ValueError):
    """A data set cannot be built or loaded; the message says what to change."""


@dataclass(frozen=True)
class Example:
    text: str
    label: int  # the class id; TAGGED in a multi-label data set
    group: int  # examples sharing a group (a sentence pair, a user-given id) never straddle splits
    tags: tuple[int, ...] = ()  # multi-label: the ids of every label the text has (none is allowed)


@dataclass(frozen=True)
class Dataset:
    name: str
    labels: tuple[str, ...]  # labels[i] is the name of class id i
    train: list[Example]
    val: list[Example]
    test: list[Example]
    extra: dict[str, list[Example]] = field(default_factory=dict)  # further evaluation splits
    ordered: bool = False  # the classes are ranks (star ratings): errors have a size
    multi_label: bool = False  # each text has any number of the labels (Example.tags), not one

    def __post_init__(self) -> None:
        if len(self.labels) < 2:
            raise DataError(f"{self.name}: a classifier needs at least 2 labels, got {list(self.labels)}")
        if self.multi_label and self.ordered:
            raise DataError(f"{self.name}: multi-label data cannot have ordered (ordinal) labels")
        for split, examples in self.splits().items():
            for ex in examples:
                if self.multi_label:
                    if ex.label != TAGGED or not all(0 <= t < len(self.labels) for t in ex.tags):
                        raise DataError(
                            f"{self.name}/{split}: multi-label row with label {ex.label} and label ids "
                            f"{list(ex.tags)}; ids must lie in 0..{len(self.labels) - 1}"
                        )
                elif ex.tags or not 0 <= ex.label < len(self.labels):
                    raise DataError(
                        f"{self.name}/{split}: label id {ex.label} outside 0..{len(self.labels) - 1}"
                    )

    @property
    def num_classes(self) -> int:
        return len(self.labels)

    def splits(self) -> dict[str, list[Example]]:
        """Every split by name: train, val, test, then the extra ones."""
        return {"train": self.train, "val": self.val, "test": self.test, **self.extra}


def words(text: str) -> list[str]:
    """Lower-cased words without punctuation: the unit the tokenizer and the bag-of-words checks use."""
    return _WORD.findall(text.lower())


def split_groups(
    examples: Sequence[Example], *, seed: int, val_fraction: float, test_fraction: float
) -> tuple[list[Example], list[Example], list[Example]]:
    """Split into (train, val, test) by group, so the members of a group stay together.

    Groups are stratified by the labels they hold, so a class keeps its share in each split
    when every example is its own group. Each split is shuffled with ``seed``.
    """
    if not (0.0 <= val_fraction < 1.0 and 0.0 <= test_fraction < 1.0 and val_fraction + test_fraction < 1.0):
        raise DataError(
            f"val_fraction ({val_fraction}) and test_fraction ({test_fraction}) must be in [0, 1) "
            "and leave room for training data"
        )
    members: dict[int, list[Example]] = defaultdict(list)
    for ex in examples:
        members[ex.group].append(ex)
    strata: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for group, exs in members.items():
        strata[tuple(sorted({e.label for e in exs}))].append(group)

    rng = random.Random(seed)
    parts: tuple[list[Example], list[Example], list[Example]] = ([], [], [])
    for key in sorted(strata):
        groups = sorted(strata[key])
        rng.shuffle(groups)
        n_val, n_test = round(len(groups) * val_fraction), round(len(groups) * test_fraction)
        for i, group in enumerate(groups):
            target = 1 if i < n_val else 2 if i < n_val + n_test else 0
            parts[target].extend(members[group])
    train, val, test = parts
    for name, split, fraction in (("validation", val, val_fraction), ("test", test, test_fraction)):
        if fraction > 0 and not split:
            raise DataError(
                f"{len(members)} groups of examples are too few for a {fraction:.0%} {name} split"
            )
    if not train:
        raise DataError(f"{len(members)} groups of examples leave nothing to train on")
    for split in parts:
        rng.shuffle(split)
    return train, val, test
