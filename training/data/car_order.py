"""car-order: which side is the white car on? Pairs of sentences with identical bags of words.

Each pair is one template filled twice with the same words, swapping either the two colours
or the two sides, so both sentences hold exactly the same multiset of words yet have opposite
labels: a model that ignores word order cannot beat chance. Some templates are held out of
training entirely (``template_heldout``) to measure how far a model generalises beyond the
sentence shapes it was trained on.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Literal

from attnserve.training.data.core import DataError, Example, words

LABELS = ("negative", "positive")  # positive: the white car is on the left
WHITE, BLACK, LEFT, RIGHT = "white", "black", "left", "right"

# abs:             the {c1} car is on side {p1}, the {c2} car on side {p2}
# first_of_second: the {c1} car is on side {rel} of the {c2} car
# second_of_first: the {c2} car is on side {rel} of the {c1} car
Kind = Literal["abs", "first_of_second", "second_of_first"]
_ARTICLE = re.compile(r"\b([Aa]) ([aeiou])")


@dataclass(frozen=True)
class Template:
    name: str
    kind: Kind
    text: str
    heldout: bool = False


# {car1} / {car2} stand for "{a1} {c1} car" / "{a2} {c2} car"; every sentence may open with a scene.
TEMPLATES: tuple[Template, ...] = (
    Template("abs-is-on", "abs", "the {car1} {verb} on the {p1} and the {car2} {verb} on the {p2} {place}."),
    Template("abs-side-first", "abs", "on the {p1} {verb} the {car1}, and on the {p2} the {car2}."),
    Template("abs-there-is", "abs", "there is a {car1} on the {p1} and a {car2} on the {p2} {place}."),
    Template("abs-side-taken", "abs", "the {p1} side is taken by the {car1}, the {p2} side by the {car2}."),
    Template("abs-can-be-seen", "abs", "a {car1} can be seen on the {p1} {place}, and a {car2} on the {p2}."),
    Template("abs-mixed-order", "abs", "on the {p1} there is a {car1}, and the {car2} {verb} on the {p2}."),
    Template("abs-the-one", "abs",
             "the {car1} is the one on the {p1}, while the {car2} is the one on the {p2}."),
    Template("abs-predicate", "abs",
             "the {a1} car on the {p1} is {c1} and the {a2} car on the {p2} is {c2} {place}."),
    Template("abs-we-parked", "abs", "we parked the {car1} on the {p1} and the {car2} on the {p2} {place}."),
    Template("abs-was-parked", "abs",
             "the {car1} was parked on the {p1} {place} and the {car2} was parked on the {p2}."),
    Template("rel-to-the-of", "first_of_second", "the {car1} {verb} to the {rel} of the {car2} {place}."),
    Template("rel-side-of", "first_of_second",
             "the {car1} is parked {place} on the {rel} side of the {car2}."),
    Template("rel-seen-from", "first_of_second", "seen from the street, the {car1} is {rel} of the {car2}."),
    Template("rel-fronted", "second_of_first", "to the {rel} of the {car1} {verb} the {car2} {place}."),
    Template("rel-flanked", "second_of_first", "the {car1} is flanked on the {rel} by the {car2} {place}."),
    # Held out of training: new words and orderings built from constructions seen above.
    Template("held-we-see", "abs",
             "on the {p1} we see a {car1} and on the {p2} we see a {car2} {place}.", True),
    Template("held-whereas", "abs",
             "the {car1} sits {place} on the {p1}, whereas the {car2} sits on the {p2}.", True),
    Template("held-placed", "first_of_second", "the {car1} is placed to the {rel} of the {car2}.", True),
)

# Fillers never name a side, so the label depends only on the template's slots. Scenes
# repeat the colour words to defeat "which colour is mentioned first" shortcuts; empty
# strings make a filler optional.
ADJECTIVES = ("", "", "", "small", "old", "new", "shiny", "rusty", "big", "fast", "dusty", "clean",
              "electric")
VERBS = ("is", "stands", "is parked", "sits", "waits")
PLACES = ("", "", "", "in the street", "at the station", "near the park", "in the garage", "outside the shop",
          "by the river", "in the yard")
SCENES = ("With a white frame and black border,", "Under a black sky with white clouds,",
          "By a white fence and black gate,", "In the black and white picture,",
          "Beside a black sign with white letters,")
# Scenes make the task markedly harder (a small transformer loses several points of test
# accuracy when every other sentence has one), so they open one sentence in five.
SCENE_RATE = 0.2


@dataclass(frozen=True)
class CarOrderPair:
    first: Example
    second: Example
    template: str


def _left_colour(kind: Kind, slots: dict[str, str]) -> str:
    if kind == "abs":
        return slots["c1"] if slots["p1"] == LEFT else slots["c2"]
    if kind == "first_of_second":
        return slots["c1"] if slots["rel"] == LEFT else slots["c2"]
    return slots["c2"] if slots["rel"] == LEFT else slots["c1"]


def render(template: Template, slots: dict[str, str]) -> tuple[str, int]:
    """The sentence for ``slots`` (c1, c2, p1, p2, rel, a1, a2, verb, place, scene) and its label."""
    car1, car2 = f"{slots['a1']} {slots['c1']} car", f"{slots['a2']} {slots['c2']} car"
    raw = slots["scene"] + " " + template.text.format(car1=car1, car2=car2, **slots)
    text = " ".join(raw.split()).replace(" ,", ",").replace(" .", ".")
    text = _ARTICLE.sub(r"\1n \2", text)  # "a old car" -> "an old car"; both pair members alike
    label = 1 if _left_colour(template.kind, slots) == WHITE else 0
    return text[0].upper() + text[1:], label


def _swapped(template: Template, slots: dict[str, str], rng: random.Random) -> dict[str, str]:
    # Swapping the two sides is only word-neutral when both sides are named (abs templates).
    if template.kind == "abs" and rng.random() < 0.5:
        return {**slots, "p1": slots["p2"], "p2": slots["p1"]}
    return {**slots, "c1": slots["c2"], "c2": slots["c1"]}


def generate_pairs(n_pairs: int, seed: int) -> list[CarOrderPair]:
    """``n_pairs`` distinct pairs, templates used in turn so each gets an equal share."""
    if n_pairs < 1:
        raise DataError(f"n_pairs must be >= 1, got {n_pairs}")
    rng = random.Random(seed)
    order = [TEMPLATES[i % len(TEMPLATES)] for i in range(n_pairs)]
    rng.shuffle(order)
    seen: set[str] = set()
    pairs: list[CarOrderPair] = []
    for template in order:
        for _ in range(1000):  # the filler space is large: collisions are rare
            c1, c2 = rng.sample((WHITE, BLACK), 2)
            p1, p2 = rng.sample((LEFT, RIGHT), 2)
            scene = rng.choice(SCENES) if rng.random() < SCENE_RATE else ""
            slots = {"c1": c1, "c2": c2, "p1": p1, "p2": p2, "rel": rng.choice((LEFT, RIGHT)),
                     "a1": rng.choice(ADJECTIVES), "a2": rng.choice(ADJECTIVES), "verb": rng.choice(VERBS),
                     "place": rng.choice(PLACES), "scene": scene}
            text_a, label_a = render(template, slots)
            text_b, label_b = render(template, _swapped(template, slots, rng))
            if text_a not in seen and text_b not in seen:
                break
        else:
            raise DataError(f"cannot find {n_pairs} distinct car-order pairs; ask for fewer")
        if sorted(words(text_a)) != sorted(words(text_b)) or label_a == label_b or text_a == text_b:
            raise RuntimeError(f"template {template.name!r} made an invalid pair: {text_a!r} / {text_b!r}")
        seen.update((text_a, text_b))
        group = len(pairs)
        pairs.append(
            CarOrderPair(Example(text_a, label_a, group), Example(text_b, label_b, group), template.name)
        )
    return pairs
