"""What a load test sends: a seeded mix of sentence lengths, batch sizes, attention and deadlines.

Nothing here touches the network. `Workload.next_call()` draws one `Call`: its texts (one,
or a batch), whether it asks for attention, its deadline, and for a share of calls a named
*bad* request that the protocol layer turns into a request the server must refuse.

Lengths are counted in words; the default corpus is built from car-scene clauses without
punctuation, so for the models this project trains a word is one token.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from attnserve.service.common.model_info import ModelInfo

LENGTH_CLASSES = ("short", "medium", "long", "over")

_CLAUSES = (
    "the white car is on the left",
    "the black car is on the right",
    "a small white car waits near the park",
    "the old black car is parked in the street",
    "on the left stands the white car",
    "to the right of the white car sits the black car",
    "we parked the new black car by the river",
    "the shiny white car is in front of the shop",
    "a rusty black car can be seen at the station",
    "the black car is flanked on the left by the white car",
    "seen from the street the white car is left of the black car",
    "the fast electric car is parked in the garage",
)


@dataclass(frozen=True)
class ModelLimits:
    """What the server says about the model (GetModel / ModelMetadata), used to aim requests:
    the model's max_len and the server's limits under their own names (`LimitsInfo`)."""

    max_len: int
    max_texts_per_request: int = 64
    max_text_chars: int = 10_000
    long_text: str = "truncate"  # or "reject": over-length texts are then expected errors

    @classmethod
    def of(cls, info: ModelInfo) -> ModelLimits:
        """A model's limits as the client reads them back from the server."""
        limits = info.limits
        return cls(
            info.max_len, limits.max_texts_per_request, limits.max_text_chars, limits.long_text or "truncate"
        )


@dataclass(frozen=True)
class Mix:
    """Shares of the request mix; every share is a probability in [0, 1]."""

    lengths: tuple[float, float, float, float] = (0.4, 0.35, 0.2, 0.05)  # short, medium, long, over
    attention_share: float = 0.3
    batch_share: float = 0.2  # calls carrying several texts
    max_batch: int = 32
    deadline_share: float = 0.1
    deadline_ms: float = 250.0
    bad_share: float = 0.05

    def __post_init__(self) -> None:
        if (
            len(self.lengths) != len(LENGTH_CLASSES)
            or any(w < 0 for w in self.lengths)
            or not sum(self.lengths)
        ):
            raise ValueError(f"lengths: {len(LENGTH_CLASSES)} non-negative weights, not all zero")
        for name in ("attention_share", "batch_share", "deadline_share", "bad_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}: {value} is not a share in [0, 1]")
        if self.max_batch < 2:
            raise ValueError(f"max_batch: {self.max_batch}; batched calls need at least 2 texts")
        if self.deadline_ms <= 0:
            raise ValueError(f"deadline_ms: {self.deadline_ms} must be positive")


@dataclass(frozen=True)
class Call:
    """One request to make. `bad` names a deliberately invalid request (None: a valid one)."""

    name: str  # the statistics name: bounded set of values
    texts: tuple[str, ...]
    attention: bool
    deadline_s: float | None
    bad: str | None = None
    over_length: bool = False  # at least one text is longer than max_len


def word_span(length_class: str, max_len: int) -> tuple[int, int]:
    """(fewest, most) words of a length class for a model of `max_len` tokens."""
    short = max(2, min(8, max_len // 4))
    medium = max(short + 1, min(20, max_len // 2))
    spans = {
        "short": (2, short),
        "medium": (short + 1, medium),
        "long": (medium + 1, max(medium + 1, max_len - 1)),
        "over": (max_len + 2, 2 * max_len),
    }
    return spans[length_class]


class Corpus:
    """Sentences of a requested word count, from built-in clauses or the lines of a file."""

    def __init__(self, rng: random.Random, lines: Sequence[str] = ()) -> None:
        self._rng = rng
        pool = [line.split() for line in lines if line.strip()] or [c.split() for c in _CLAUSES]
        self._words = [word for line in pool for word in line]
        self._lines = pool

    def sentence(self, words: int) -> str:
        out: list[str] = []
        while len(out) < words:
            if out:
                out.append("and")
            out.extend(self._rng.choice(self._lines))
        return " ".join(out[:words])


class Workload:
    """Draws calls. `bad_kinds` are the invalid requests the API's protocol can build."""

    def __init__(
        self, mix: Mix, limits: ModelLimits, bad_kinds: Sequence[str], *, seed: int, lines: Sequence[str] = ()
    ) -> None:
        self.mix = mix
        self.limits = limits
        self._bad_kinds = tuple(bad_kinds)
        self._rng = random.Random(seed)
        self.corpus = Corpus(random.Random(seed + 1), lines)

    def _length_class(self) -> str:
        return self._rng.choices(LENGTH_CLASSES, weights=self.mix.lengths)[0]

    def random_text(self) -> str:
        """A text of a length class drawn from the mix."""
        return self.text(self._length_class())

    def text(self, length_class: str) -> str:
        low, high = word_span(length_class, self.limits.max_len)
        return self.corpus.sentence(self._rng.randint(low, high))

    def next_call(self) -> Call:
        mix, rng = self.mix, self._rng
        deadline = mix.deadline_ms / 1000.0 if rng.random() < mix.deadline_share else None
        if self._bad_kinds and rng.random() < mix.bad_share:
            kind = rng.choice(self._bad_kinds)
            return Call(f"bad:{kind}", (self.text("short"),), False, deadline, bad=kind)
        attention = rng.random() < mix.attention_share
        limit = min(mix.max_batch, self.limits.max_texts_per_request)
        if limit >= 2 and rng.random() < mix.batch_share:
            count = rng.randint(2, limit)
            classes = [self._length_class() for _ in range(count)]
            size = "x2-8" if count <= 8 else f"x9-{limit}"
            name = f"batch {size}"
        else:
            classes = [self._length_class()]
            name = classes[0]
        over = "over" in classes
        if attention:
            name += " +attention"
        texts = tuple(self.text(c) for c in classes)
        return Call(name, texts, attention, deadline, over_length=over)
