"""greetings-food: a tiny, easy two-class task for smoke tests and demos."""

from __future__ import annotations

import itertools
import random

from attnserve.training.data.core import DataError, Example

LABELS = ("food", "greeting")
FOOD, GREETING = 0, 1

_GREETING_TEMPLATES = ("{g}!", "{g}, {who}!", "{g} {who}, how are you?", "{g}, nice to see you, {who}.",
                       "{g} {who}, how was your day?", "{g}, {who}. Long time no see.",
                       "{g} and welcome, {who}!")
_GREETINGS = ("hello", "hi", "hey", "good morning", "good evening", "good afternoon", "greetings", "howdy",
              "hi there", "welcome back")
_WHO = ("my friend", "everyone", "neighbour", "team", "Anna", "Tom", "folks", "dear", "all", "colleagues")

_FOOD_TEMPLATES = ("I would like some {f}.", "The {f} is {taste}.", "We had {f} for {meal}.",
                   "Can I have more {f} for {meal}, please?", "This {f} tastes {taste}.",
                   "{f} for {meal} again?", "The {f} we ate at {meal} was {taste}.")
_FOODS = ("pizza", "soup", "pasta", "bread", "rice", "salad", "cheese", "apples", "noodles", "cake", "curry",
          "fish")
_TASTES = ("delicious", "too salty", "very sweet", "cold", "spicy", "fresh", "bland")
_MEALS = ("lunch", "dinner", "breakfast", "brunch")


def _sentences(templates: tuple[str, ...], **slots: tuple[str, ...]) -> list[str]:
    out: set[str] = set()
    names = list(slots)
    for template in templates:
        for values in itertools.product(*(slots[n] for n in names)):
            text = template.format(**dict(zip(names, values, strict=True)))
            out.add(text[0].upper() + text[1:])
    return sorted(out)


def generate(n_pairs: int, seed: int) -> list[Example]:
    """``n_pairs`` greetings and ``n_pairs`` food sentences, each its own group."""
    greetings = _sentences(_GREETING_TEMPLATES, g=_GREETINGS, who=_WHO)
    foods = _sentences(_FOOD_TEMPLATES, f=_FOODS, taste=_TASTES, meal=_MEALS)
    limit = min(len(greetings), len(foods))
    if not 1 <= n_pairs <= limit:
        raise DataError(f"greetings-food has between 1 and {limit} pairs, asked for {n_pairs}")
    rng = random.Random(seed)
    chosen = [(t, GREETING) for t in rng.sample(greetings, n_pairs)]
    chosen += [(t, FOOD) for t in rng.sample(foods, n_pairs)]
    return [Example(text, label, group) for group, (text, label) in enumerate(chosen)]
