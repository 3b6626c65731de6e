"""A seeded stand-in for Yelp reviews: restaurant reviews with a star rating, no download.

Each review draws a star rating, then 2-5 sentences: a scene-setting sentence full of names,
opinion sentences whose clauses lean positive with a probability set by the stars, and often
a verdict. About 20% of opinions are phrased through a negated cue word of the other
polarity ("the staff was not friendly", "the fries were never soggy"), so a bag of words is
misled where word order is not. Names of places, people, streets and dishes are composed
from syllables with a heavy-tailed distribution, which gives tens of thousands of word types
at Yelp-polarity's size. 5% of the labels are replaced by a random other label.

Polarity follows Yelp Review Polarity: 1-2 stars are negative, 3-5 positive, balanced.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from attnserve.training.data import reviews_words as w
from attnserve.training.data.core import Example

POLARITY_LABELS = ("negative", "positive")
STAR_LABELS = ("1", "2", "3", "4", "5")
LABEL_NOISE = 0.05
NEGATED_SHARE = 0.2
# Chance that one opinion clause is favourable, by star rating.
FAVOURABLE = {1: 0.08, 2: 0.22, 3: 0.62, 4: 0.8, 5: 0.93}
_SPACE = len(w.ONSETS) * len(w.VOWELS) * len(w.ONSETS) * len(w.VOWELS) * len(w.CODAS)


def _name(rank: int, salt: int) -> str:
    """The made-up word of a given popularity rank: a fixed pseudo-random syllable string."""
    code = (rank * 2654435761 + salt * 40503) % _SPACE
    parts = []
    for table in (w.ONSETS, w.VOWELS, w.ONSETS, w.VOWELS, w.CODAS):
        code, digit = divmod(code, len(table))
        parts.append(table[digit])
    return "".join(parts)


class _Writer:
    """Writes one review at a time from a seeded random source."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def pick(self, options: tuple[str, ...] | list[str]) -> str:
        return options[self.rng.randrange(len(options))]

    def rare(self, salt: int) -> str:
        # Pareto ranks: a few names are common, most occur once or twice (as in real reviews).
        return _name(int(self.rng.paretovariate(0.37)), salt)

    def place(self) -> str:
        return f"{self.rare(1).capitalize()}s {self.pick(w.PLACES)}"

    def person(self) -> str:
        return (
            f"{self.pick(w.FIRST_NAMES)} {self.rare(2)}"
            if self.rng.random() < 0.4
            else self.pick(w.FIRST_NAMES)
        )

    def dish(self) -> str:
        r = self.rng.random()
        if r < 0.35:
            return f"{self.pick(w.INGREDIENTS)} {self.pick(w.FOODS)}"
        if r < 0.55:
            return f"{self.rare(3)} {self.pick(w.FOODS)}"
        if r < 0.65:
            return self.pick(w.DRINKS)
        return self.pick(w.FOODS)

    def subject(self) -> str:
        r = self.rng.random()
        if r < 0.5:
            return f"the {self.dish()}"
        if r < 0.7:
            return f"our {self.pick(w.STAFF)} {self.pick(w.FIRST_NAMES)}"
        return self.pick(w.ASPECTS)

    def opinion(self, favourable: bool) -> str:
        """One clause: subject, verb (negated or not), maybe an intensifier, a cue word, a detail."""
        negated = self.rng.random() < NEGATED_SHARE
        cue = self.pick(w.NEGATIVE if favourable == negated else w.POSITIVE)
        verb = self.pick(w.NEGATED_VERBS) if negated else self.pick(w.VERBS)
        intensifier = "" if negated else self.pick(w.INTENSIFIERS)
        parts = (self.subject(), verb, intensifier, cue, self.pick(w.HEDGES), self.detail())
        return " ".join(part for part in parts if part)

    def detail(self) -> str:
        """A neutral add-on that makes clauses as long as people's, without any opinion in it."""
        r = self.rng.random()
        if r < 0.2:
            return f"and came out after {self.rng.randint(3, 50)} minutes"
        if r < 0.4:
            return f"with a side of {self.dish()}"
        if r < 0.55:
            return f"which cost {self.rng.randint(4, 60)} dollars"
        if r < 0.72:
            return f"according to my {self.pick(w.COMPANIONS)} {self.person()}"
        return ""

    def scene(self) -> str:
        forms: tuple[Callable[[], str], ...] = (
            lambda: (
                f"we came to {self.place()} on {self.rare(4)} {self.pick(w.STREETS)} for a "
                f"{self.pick(w.MEALS)} on {self.pick(w.DAYS)} with my {self.pick(w.COMPANIONS)} "
                f"{self.person()} after {self.pick(w.EVENTS)}, and it took about "
                f"{self.rng.randint(5, 60)} minutes to get a table"
            ),
            lambda: (
                f"my {self.pick(w.COMPANIONS)} {self.person()} had been telling me about "
                f"{self.place()} in {self.pick(w.CITIES)} for months, so on {self.pick(w.DAYS)} we "
                f"finally tried it with {self.person()} and ordered the {self.dish()} and the {self.dish()}"
            ),
            lambda: (
                f"this {self.pick(w.PLACES)} next to {self.rare(5).capitalize()} {self.pick(w.STREETS)} "
                f"used to be {self.place()}, and we stopped in for {self.pick(w.MEALS)} before "
                f"{self.pick(w.EVENTS)} and paid {self.rng.randint(8, 90)} dollars for two"
            ),
            lambda: (
                f"ordered the {self.dish()}, the {self.dish()} and a {self.pick(w.DRINKS)} for "
                f"{self.pick(w.MEALS)} from {self.place()} on {self.pick(w.DAYS)}, and {self.person()} "
                f"who took the order told us it would be {self.rng.randint(5, 45)} minutes"
            ),
        )
        return forms[self.rng.randrange(len(forms))]()

    def opinions(self, p_favourable: float) -> str:
        clauses = [self.opinion(self.rng.random() < p_favourable) for _ in range(self.rng.randint(2, 5))]
        joiners = (", and ", ", but ", " and ", ", while ", ", and also ")
        text = clauses[0]
        for clause in clauses[1:]:
            text += self.pick(joiners) + clause
        return text

    def verdict(self, favourable: bool) -> str:
        place = self.place()
        if favourable:
            forms = (
                f"we will definitely be back to {place}",
                f"highly recommend {place} to anyone in the area",
                f"i would not hesitate to come back to {place}",
                f"cant wait to go back to {place}",
                f"{place} is my new favorite spot",
            )
        else:
            forms = (
                f"we will not be coming back to {place}",
                f"would not recommend {place} to anyone",
                f"save your money and skip {place}",
                f"i cant believe {place} is still open",
                f"never again, {place}",
            )
        return self.pick(forms)

    def review(self, stars: int) -> str:
        p = FAVOURABLE[stars]
        n = self.rng.randint(2, 5)
        sentences = [self.scene()] if self.rng.random() < 0.75 else []
        if n >= 3 and self.rng.random() < 0.6:
            sentences.append(self.verdict(self.rng.random() < p))
            self.rng.shuffle(sentences)  # a verdict first sometimes, as people write
        while len(sentences) < n:
            sentences.insert(len(sentences) - (len(sentences) > 1), self.opinions(p))
        return " ".join(s[0].upper() + s[1:] + "." for s in sentences)


def generate(n: int, seed: int, *, stars: bool) -> list[Example]:
    """``n`` reviews; labels are star classes ('1'..'5') or polarity (negative, positive)."""
    rng = random.Random(f"reviews/{seed}")
    noise = random.Random(f"reviews-noise/{seed}")  # its own stream: the texts do not depend on it
    writer = _Writer(rng)
    out = []
    for i in range(n):
        if stars:
            rating = rng.randint(1, 5)
            label = rating - 1
        else:
            label = i % 2
            rating = rng.choice((1, 2)) if label == 0 else rng.choices((3, 4, 5), (0.2, 0.4, 0.4))[0]
        text = writer.review(rating)
        if noise.random() < LABEL_NOISE:
            label = noise.choice([c for c in range(5 if stars else 2) if c != label])
        out.append(Example(text, label, i))
    return out
