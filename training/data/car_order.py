"""car-order: which side is the white car on? Pairs of sentences with identical bags of words.

Every sentence comes from the grammar in ``phrasing``: a construction's form, its phrasing
slots filled from the lexicons, fillers, a style (case, punctuation). A pair renders one such
sentence twice, swapping either the two colours or the two sides, so both members hold the
same multiset of words yet have opposite labels: a model that ignores word order cannot beat
chance. A pair belongs to one of three buckets: ``seen`` (constructions and phrasings that
training uses), ``template`` (a held-out construction) or ``phrasing`` (a seen construction
with a held-out phrasing in one of its slots).
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from attnserve.training.data import phrasing
from attnserve.training.data.core import DataError, Example, words
from attnserve.training.data.phrasing import Construction

LABELS = ("negative", "positive")  # positive: the white car is on the left
WHITE, BLACK, LEFT, RIGHT = "white", "black", "left", "right"
Bucket = Literal["seen", "template", "phrasing"]

# Fillers make the task harder (scenes repeat both colour words) and the sentences longer,
# so each is optional. Nearly every error of a 50-epoch transformer on held-out pairs had a
# scene when one sentence in five had one; one in ten still teaches the model to skip them.
SCENE_RATE, OPENER_RATE, CLOSER_RATE = 0.1, 0.15, 0.15
# Most people name a car by its colour alone; a sentence full of adjectives also trains the
# learned positions on long sentences only, and short ones then read differently.
ADJECTIVE_RATE = 0.3
SAME_AT_RATE = 0.75  # how often both sides are said the same way ("on the left ... on the right")
PHRASING_HELDOUT_RATE = 0.12  # share of seen-construction pairs that carry a held-out phrasing
CASES = (("sentence", 0.55), ("lower", 0.3), ("title", 0.1), ("upper", 0.05))
ENDINGS = ((".", 0.6), ("", 0.25), ("!", 0.1), ("...", 0.05))
DROP_COMMAS_RATE = 0.15

_SLOT = re.compile(r"\{(\w+)\}")
_ARTICLE = re.compile(r"\b([Aa]) ([aeiou])")
_LEXICON_OF = {"at1": "at", "at2": "at", "rel": "rel", "dir": "dir", "then": "then", "conj": "conj",
               "ord1": "ord", "ord2": "ord"}


@dataclass(frozen=True)
class Choices:
    """Everything a sentence says except the colours and sides, shared by both pair members."""

    construction: Construction
    form: str
    lexemes: dict[str, str]  # lexicon slot (at1, at2, rel, dir, then, conj, ord) -> entry
    fillers: dict[str, str]  # v, neg, we, see, adj_x, adj_y, noun, other, scene, opener, closer
    case: str
    ending: str
    drop_commas: bool


@dataclass(frozen=True)
class CarOrderPair:
    first: Example
    second: Example
    template: str  # the construction's name
    bucket: Bucket


def form_slots(form: str) -> set[str]:
    """The lexicon slots a form uses (``ord1``/``ord2`` count as ``ord``)."""
    return {_LEXICON_OF[s] for s in _SLOT.findall(form) if s in _LEXICON_OF}


def names_side(choices: Choices) -> bool:
    """Whether the sentence names a side; a ``seq`` form without ``{dir}`` reads left to right."""
    return choices.construction.kind != "seq" or "{dir}" in choices.form


def label_of(x_colour: str, side: str) -> int:
    """X is on ``side`` of Y (abs: X's own side; seq: X comes first from ``side``)."""
    return int((x_colour == WHITE) == (side == LEFT))


def _other(side: str) -> str:
    return RIGHT if side == LEFT else LEFT


def _styled(text: str, choices: Choices) -> str:
    text = " ".join(text.split())
    text = re.sub(r" +([,;:.)])", r"\1", text).replace("( ", "(")
    text = re.sub(r"([,;:])[,;:]+", r"\1", text)  # "car,, then" after an empty filler
    text = _ARTICLE.sub(r"\1n \2", text)  # "a old car" -> "an old car"; both pair members alike
    if choices.drop_commas:
        text = text.replace(",", "")
    text = text.rstrip(",;: ") + choices.ending
    if choices.case == "lower":
        return text.lower()
    if choices.case == "upper":
        return text.upper()
    if choices.case == "title":
        return string.capwords(text)
    return text[0].upper() + text[1:]


def render(choices: Choices, x_colour: str, side: str) -> tuple[str, int]:
    """The sentence with car X in ``x_colour`` (Y in the other colour) on ``side``, and its label."""
    if not names_side(choices) and side != LEFT:
        raise ValueError(f"{choices.form!r} names no side, so it can only read left to right")
    y_colour = BLACK if x_colour == WHITE else WHITE
    f, lx = choices.fillers, choices.lexemes
    s, o = side, _other(side)
    values = {
        "X": f"the {f['adj_x']} {x_colour} {f['noun']}", "Y": f"the {f['adj_y']} {y_colour} {f['noun']}",
        "aX": f"a {f['adj_x']} {x_colour} {f['noun']}", "aY": f"a {f['adj_y']} {y_colour} {f['noun']}",
        "bX": f"{f['adj_x']} {x_colour} {f['noun']}", "bY": f"{f['adj_y']} {y_colour} {f['noun']}",
        "cX": x_colour, "cY": y_colour, "oY": f"the {y_colour} one", "nY": f["other"],
        "s1": s, "s2": o, "s": s, "noun": f["noun"], "v": f["v"], "neg": f["neg"], "we": f["we"],
        "see": f["see"],
        "at1": lx.get("at1", "").format(s=s, o=o), "at2": lx.get("at2", "").format(s=o, o=s),
        "rel": lx.get("rel", "").format(s=s, o=o), "dir": lx.get("dir", "").format(s=s, o=o),
        "then": lx.get("then", ""), "conj": lx.get("conj", ""),
        "ord1": lx.get("ord", "|").split("|")[0], "ord2": lx.get("ord", "|").split("|")[1],
    }
    core = choices.form.format(**values)
    text = " ".join((f["scene"], f["opener"], core, f["closer"]))
    return _styled(text, choices), label_of(x_colour, side)


def _weighted(rng: random.Random, options: tuple[tuple[str, float], ...]) -> str:
    return rng.choices([o for o, _ in options], weights=[w for _, w in options])[0]


def _optional(rng: random.Random, options: tuple[str, ...], rate: float) -> str:
    return rng.choice(options) if rng.random() < rate else ""


def choose(construction: Construction, bucket: Bucket, rng: random.Random) -> Choices:
    """Draw a form, phrasings, fillers and a style for ``construction``.

    In the ``phrasing`` bucket one lexicon slot of the form gets a held-out entry; every
    other slot (and every slot in the other buckets) draws from the seen entries only.
    """
    forms = construction.forms
    if bucket == "phrasing":
        forms = tuple(f for f in forms if any(phrasing.LEXICONS[s].heldout for s in form_slots(f)))
        if not forms:
            raise ValueError(f"{construction.name} has no slot that a held-out phrasing could fill")
    form = rng.choice(forms)
    slots = sorted(form_slots(form))
    held = rng.choice([s for s in slots if phrasing.LEXICONS[s].heldout]) if bucket == "phrasing" else None
    lexemes: dict[str, str] = {}
    for slot in slots:
        lexicon = phrasing.LEXICONS[slot]
        pool = lexicon.heldout if slot == held else lexicon.seen
        if slot == "at":
            lexemes["at1"] = rng.choice(pool)
            same = rng.random() < SAME_AT_RATE or slot == held  # one held-out entry, said twice
            lexemes["at2"] = lexemes["at1"] if same else rng.choice(lexicon.seen)
        else:
            lexemes[slot] = rng.choice(pool)
    we, see = rng.choice(phrasing.WE_SEE)
    fillers = {
        "v": rng.choice(phrasing.VERBS), "neg": rng.choice(phrasing.NEGATED), "we": we,
        "see": see, "noun": rng.choice(phrasing.NOUNS),
        "adj_x": _optional(rng, phrasing.ADJECTIVES, ADJECTIVE_RATE),
        "adj_y": _optional(rng, phrasing.ADJECTIVES, ADJECTIVE_RATE), "other": rng.choice(phrasing.OTHERS),
        "scene": _optional(rng, phrasing.SCENES, SCENE_RATE),
        "opener": _optional(rng, phrasing.OPENERS, OPENER_RATE),
        "closer": _optional(rng, phrasing.CLOSERS, CLOSER_RATE),
    }
    return Choices(construction, form, lexemes, fillers, _weighted(rng, CASES), _weighted(rng, ENDINGS),
                   rng.random() < DROP_COMMAS_RATE)


def _pair(choices: Choices, rng: random.Random) -> tuple[tuple[str, int], tuple[str, int]] | None:
    x_colour = rng.choice((WHITE, BLACK))
    side = rng.choice((LEFT, RIGHT)) if names_side(choices) else LEFT
    first = render(choices, x_colour, side)
    # Swapping the colours or the sides flips the label; a swap makes a pair only where it
    # keeps the bag of words (sides named alike, both colours named).
    swaps = [render(choices, BLACK if x_colour == WHITE else WHITE, side)]
    if names_side(choices):
        swaps.append(render(choices, x_colour, _other(side)))
    bag = sorted(words(first[0]))
    valid = [s for s in swaps if sorted(words(s[0])) == bag]
    return (first, rng.choice(valid)) if valid else None  # e.g. one colour, "starting from the left"


def _buckets(n_pairs: int, rng: random.Random) -> list[tuple[Construction, Bucket]]:
    """Constructions in turn, so each gets an equal share; some seen ones carry held-out phrasings."""
    order = [phrasing.CONSTRUCTIONS[i % len(phrasing.CONSTRUCTIONS)] for i in range(n_pairs)]
    rng.shuffle(order)
    out: list[tuple[Construction, Bucket]] = []
    for c in order:
        can_hold = any(phrasing.LEXICONS[s].heldout for f in c.forms for s in form_slots(f))
        if c.heldout:
            out.append((c, "template"))
        elif can_hold and rng.random() < PHRASING_HELDOUT_RATE:
            out.append((c, "phrasing"))
        else:
            out.append((c, "seen"))
    return out


def generate_singles(
    n_couples: int, seed: int, *, exclude: Collection[str] = (), group_start: int = 0
) -> list[Example]:
    """``n_couples`` couples of one-car sentences (``phrasing.SINGLES``), for training only.

    A couple says one side twice, once per colour, so labels balance; its two sentences
    differ in their bag of words, so unlike ``generate_pairs`` no split of them proves word
    order. Seen phrasings only, and no sentence with the words of a text in ``exclude``.
    """
    rng = random.Random(seed + 1)
    seen = {" ".join(words(text)) for text in exclude}
    out: list[Example] = []
    for i in range(n_couples):
        construction = phrasing.SINGLES[i % len(phrasing.SINGLES)]
        for _ in range(1000):
            choices = choose(construction, "seen", rng)
            side = rng.choice((LEFT, RIGHT))
            couple = [render(choices, colour, side) for colour in (WHITE, BLACK)]
            keys = [" ".join(words(text)) for text, _ in couple]
            if not seen.intersection(keys):
                break
        else:
            raise DataError(f"cannot find {n_couples} distinct one-car couples; ask for fewer")
        seen.update(keys)
        out += [Example(text, label, group_start + i) for text, label in couple]
    return out


def generate_pairs(n_pairs: int, seed: int, *, exclude: Collection[str] = ()) -> list[CarOrderPair]:
    """``n_pairs`` distinct pairs of opposite-label sentences with identical bags of words.

    No sentence has the words of a text in ``exclude`` (case and punctuation aside): short
    sentences of an evaluation set can coincide with generated ones by chance.
    """
    if n_pairs < 1:
        raise DataError(f"n_pairs must be >= 1, got {n_pairs}")
    rng = random.Random(seed)
    seen = {" ".join(words(text)) for text in exclude}
    pairs: list[CarOrderPair] = []
    for construction, bucket in _buckets(n_pairs, rng):
        for _ in range(1000):  # the filler space is large: collisions are rare
            pair = _pair(choose(construction, bucket, rng), rng)
            if pair is None:
                continue
            (text_a, label_a), (text_b, label_b) = pair
            # Case and punctuation aside, a sentence occurs once, so none leaks across splits.
            key_a, key_b = " ".join(words(text_a)), " ".join(words(text_b))
            if key_a not in seen and key_b not in seen:
                break
        else:
            raise DataError(f"cannot find {n_pairs} distinct car-order pairs; ask for fewer")
        if sorted(words(text_a)) != sorted(words(text_b)) or label_a == label_b or text_a == text_b:
            raise RuntimeError(f"{construction.name!r} made an invalid pair: {text_a!r} / {text_b!r}")
        seen.update((key_a, key_b))
        group = len(pairs)
        pairs.append(CarOrderPair(Example(text_a, label_a, group), Example(text_b, label_b, group),
                                  construction.name, bucket))
    return pairs
