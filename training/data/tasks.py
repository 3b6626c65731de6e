"""Built-in tasks by name."""

from __future__ import annotations

import random
from dataclasses import dataclass

from attnserve.training.data import car_order, greetings, reviews
from attnserve.training.data.augment import with_distractor_prefix
from attnserve.training.data.core import DataError, Dataset, Example, split_groups

TEMPLATE_HELDOUT = "template_heldout"


@dataclass(frozen=True)
class TaskDefaults:
    size: int  # pairs for car-order and greetings-food, reviews for reviews-*
    max_len: int | None = None  # None: the model family's own default
    val_fraction: float = 0.1
    test_fraction: float = 0.1


# car-order: 2000 pairs give 167 held-out pairs per evaluation split, and the transformer
# generalised clearly better from 1333 training pairs than from 400 (held-out-pair accuracy
# mean 0.993 vs 0.958 over 4 seeds, query/key gain 3) for about the same training time.
# reviews-*: Yelp Review Polarity's shape as the notebook used it: 100,000 reviews to train
# on, 10,000 each for validation and test, 256 tokens.
DEFAULTS = {
    "car-order": TaskDefaults(2000),
    "greetings-food": TaskDefaults(40),
    "reviews-polarity": TaskDefaults(120_000, 256, 1 / 12, 1 / 12),
    "reviews-stars": TaskDefaults(120_000, 256, 1 / 12, 1 / 12),
}
TASKS = tuple(DEFAULTS)
DEFAULT_PAIRS = {name: d.size for name, d in DEFAULTS.items()}


def load_task(
    name: str,
    *,
    seed: int = 0,
    n_pairs: int | None = None,
    distractor_prefix: bool = False,
    val_fraction: float | None = None,
    test_fraction: float | None = None,
) -> Dataset:
    """Generate a built-in task, split by group (a car-order pair never straddles splits).

    ``n_pairs`` is the task's size: pairs of opposite-label sentences for car-order and
    greetings-food, reviews for reviews-*; ``None`` takes the task's default. car-order
    adds a ``template_heldout`` split holding every pair of the templates that training
    never sees. With ``distractor_prefix`` every text is preceded by another text of its
    own split. Fractions default to the task's own.
    """
    if name not in DEFAULTS:
        raise DataError(f"unknown task {name!r}; built-in tasks: {', '.join(TASKS)}")
    defaults = DEFAULTS[name]
    n = defaults.size if n_pairs is None else n_pairs
    extra: dict[str, list[Example]] = {}
    labels: tuple[str, ...]
    ordered = False
    if name == "car-order":
        heldout_names = {t.name for t in car_order.TEMPLATES if t.heldout}
        pairs = car_order.generate_pairs(n, seed)
        seen = [ex for p in pairs if p.template not in heldout_names for ex in (p.first, p.second)]
        heldout = [ex for p in pairs if p.template in heldout_names for ex in (p.first, p.second)]
        random.Random(seed).shuffle(heldout)
        extra[TEMPLATE_HELDOUT] = heldout
        labels = car_order.LABELS
    elif name == "greetings-food":
        seen = greetings.generate(n, seed)
        labels = greetings.LABELS
    else:
        if n < 20:
            raise DataError(f"{name} needs at least 20 reviews, got {n}")
        stars = name == "reviews-stars"
        seen = reviews.generate(n, seed, stars=stars)
        labels = reviews.STAR_LABELS if stars else reviews.POLARITY_LABELS
        ordered = stars
    train, val, test = split_groups(
        seen,
        seed=seed,
        val_fraction=defaults.val_fraction if val_fraction is None else val_fraction,
        test_fraction=defaults.test_fraction if test_fraction is None else test_fraction,
    )
    ds = Dataset(name=name, labels=labels, train=train, val=val, test=test, extra=extra, ordered=ordered)
    return with_distractor_prefix(ds, seed) if distractor_prefix else ds
