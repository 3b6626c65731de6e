"""The car-order grammar: constructions (sentence shapes) and the phrasings that fill them.

A sentence says where two cars, X (named first) and Y (named second), stand in one of three
ways, its construction's *kind*:

- ``abs``: each car has a side of its own: X on side ``s1``, Y on side ``s2`` (the other side);
- ``rel``: X stands on side ``s`` of Y;
- ``seq``: X comes before Y in the direction ``d`` ("from left to right" when ``d`` is left).
  Forms without a ``{dir}`` slot read left to right, as people do when they list things.

A construction's forms are strings with slots. Slots filled from a phrasing lexicon below
(``{at1}``, ``{rel}``, ``{dir}``, ``{then}``, ...) are where one relation can be said many ways;
the car slots are ``{X}`` ("the old white car"), ``{aX}`` ("a white car"), ``{bX}`` ("white car"),
``{cX}`` (the colour alone), ``{oY}`` ("the black one") and ``{nY}`` ("the other one", no
colour: such a form names one colour, so its pairs swap the sides); ``{noun}`` is the car noun and
``{s1}``, ``{s2}``, ``{s}`` are bare side words.

Held-out entries never reach training: a held-out construction is evaluated as
``template_heldout`` (a new sentence shape made of phrasings seen in training), a held-out
phrasing as ``phrasing_heldout`` (a new way to say a relation, inside seen shapes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["abs", "rel", "seq"]


@dataclass(frozen=True)
class Lexicon:
    """The ways to fill one slot; ``{s}`` is the side this slot names, ``{o}`` the other one."""

    slot: str
    seen: tuple[str, ...]
    heldout: tuple[str, ...] = ()


@dataclass(frozen=True)
class Construction:
    name: str
    kind: Kind
    forms: tuple[str, ...]
    heldout: bool = False


# ``at1``/``at2`` share this lexicon (and usually one entry); ``{s}`` is s1 or s2.
AT = Lexicon(
    "at",
    ("on the {s}", "on the {s}", "on the {s} side", "to the {s}", "at the {s}", "on the {s} of the picture",
     "in the {s} spot", "at the {s} end", "in the {s} lane", "over on the {s}"),
    ("on the {s}-hand side", "at the very {s}", "in the {s} corner"),
)


def _modified(adverbs: tuple[str, ...], cores: tuple[str, ...]) -> tuple[str, ...]:
    """Every core with every adverb in front of it ("" for none)."""
    return tuple(f"{adverb} {core}".strip() for adverb in adverbs for core in cores)


# A relation is an optional adverb and a core; a held-out relation has a held-out adverb or a
# held-out core, so the model must read "immediately to the left of" from "just to the left of".
REL_CORES = ("{s} of", "to the {s} of", "on the {s} side of", "on the {s} of", "to the {s} side of",
             "further {s} than", "further to the {s} than")
REL_ADVERBS = ("", "", "", "", "just", "directly", "slightly", "somewhere", "a little")
REL_CORES_HELDOUT = ("on the {s}-hand side of",)
REL_ADVERBS_HELDOUT = ("immediately", "a bit")
REL = Lexicon(
    "rel",
    _modified(REL_ADVERBS, REL_CORES),
    _modified(REL_ADVERBS_HELDOUT, REL_CORES + REL_CORES_HELDOUT)
    + _modified(tuple(dict.fromkeys(REL_ADVERBS)), REL_CORES_HELDOUT),
)
DIR = Lexicon(
    "dir",
    ("from {s} to {o}", "from {s} to {o}", "from the {s} to the {o}", "going from {s} to {o}", "{s} to {o}",
     "reading from {s} to {o}", "starting from the {s}", "starting on the {s}", "in order from {s} to {o}"),
    ("counting from the {s}", "looking {s} to {o}", "when read {s} to {o}"),
)
THEN = Lexicon(
    "then",
    ("then", ", then", "and then", "followed by", ", followed by", "and", ",", "and after it",
     "and next", ", next", ", and then"),
    ("and after that", "and just after it", "trailed by"),
)
CONJ = Lexicon(
    "conj",
    (" and ", ", and ", ", ", "; ", ", while ", ". ", ", but ", " and also ", " - "),
    (", whereas ", " and meanwhile "),
)
# (first, second) markers of a sequence.
ORD = Lexicon("ord", ("first|second", "first|then", "first|next", "first|last", "first comes|then comes"),
              ("firstly|secondly", "to begin with|after that"))
LEXICONS = {lex.slot: lex for lex in (AT, REL, DIR, THEN, CONJ, ORD)}

CONSTRUCTIONS: tuple[Construction, ...] = (
    Construction("abs-subject", "abs", ("{X} {v} {at1}{conj}{Y} {v} {at2}", "{X} {v} {at1}{conj}{Y} {at2}",
                                        "{X} {v} {at1}{conj}{oY} {v} {at2}",
                                        "{X} {v} {at1}{conj}{nY} {at2}")),
    Construction("abs-side-first", "abs", ("{at1} {v} {X}{conj}{at2} {v} {Y}", "{at1} {v} {X}{conj}{at2} {Y}",
                                           "{at1} there is {aX}{conj}{at2} there is {aY}")),
    Construction("abs-there-is", "abs", ("there is {aX} {at1}{conj}{aY} {at2}",
                                         "there's {aX} {at1}{conj}{aY} {at2}",
                                         "there is {aX} {at1}{conj}there is {aY} {at2}")),
    Construction("abs-predicate", "abs", ("the {noun} {at1} is {cX}{conj}the one {at2} is {cY}",
                                          "the {noun} {at1} is {cX}{conj}the {noun} {at2} {cY}",
                                          "the {noun} {at1} is the {cX} one{conj}"
                                          "the {noun} {at2} is the {cY} one",
                                          "the {s1} {noun} is {cX}{conj}the {s2} one is {cY}")),
    # One side said, the other denied: "the white car is on the left, not on the right" names
    # one colour and both sides, "the car on the left is white, not black" one side and both
    # colours, so their pairs keep the bag of words. Without them a sentence about one car
    # reads as the first half of a two-car sentence.
    Construction("abs-not", "abs", ("{X} {v} {at1}, not {at2}", "{X} {v} {at1}, not {oY}",
                                    "the {noun} {at1} is {cX}, not {cY}", "{X} is the one {at1}, not {oY}",
                                    "the {noun} {at1} is {cX}{conj}the {noun} {at2} is not",
                                    "{X} {v} {at1} and not {at2}")),
    # Denials, questions and clefts: "the white car isn't on the right", "is the black car on the
    # left? no, it's on the right", "it's the white car, not the black one, that is on the
    # left". A denied side is the other car's (X is not at s2), so X's side is still s1.
    Construction("abs-denied", "abs", ("{X} {neg} {at2}{conj}{Y} {neg} {at1}", "{X} {neg} {at2}, it's {at1}",
                                       "{X} {neg} {at2}{conj}it {v} {at1}", "is {X} {at2}? no, it's {at1}",
                                       "is {X} {at2}? no, {at1}", "is {X} {at1}? yes, and {Y} is {at2}",
                                       "it's not {X} that {v} {at2}, it's {oY}")),
    Construction("abs-cleft", "abs", ("it's {X}, not {oY}, that {v} {at1}", "{X}, not {oY}, {v} {at1}",
                                      "it is {X} and not {oY} that {v} {at1}",
                                      "{X} and not {oY} {v} {at1}")),
    Construction("abs-terse", "abs", ("{bX} {s1}, {bY} {s2}", "{cX} {s1}, {cY} {s2}",
                                      "{cX} {noun} {s1} and {cY} {noun} {s2}", "{bX} {at1}, {bY} {at2}",
                                      "it's {cX} {at1} and {cY} {at2}")),
    Construction("abs-colon", "abs", ("{s1}: {bX}, {s2}: {bY}", "{s1}: {X}; {s2}: {Y}",
                                      "{s1} side: {cX}, {s2} side: {cY}", "{s1} - {bX}, {s2} - {bY}",
                                      "{s1}most: {bX}. {s2}most: {bY}", "{s1}most: {cX}, {s2}most: {cY}")),
    Construction("abs-most", "abs", ("the {s1}most {noun} is {cX}{conj}the {s2}most one is {cY}",
                                     "{X} is the {s1}most one{conj}{Y} is the {s2}most",
                                     "{X} is the {s1}most one{conj}{nY} is the {s2}most")),
    Construction("abs-parked", "abs", ("{we} parked {X} {at1}{conj}{Y} {at2}",
                                       "{X} was parked {at1}{conj}{Y} was parked {at2}")),
    Construction("abs-the-one", "abs", ("{X} is the one {at1}{conj}{Y} is the one {at2}",
                                        "{X} is the {noun} {at1}{conj}{Y} the {noun} {at2}",
                                        "{X} is the one {at1}{conj}{nY} is the one {at2}",
                                        "the {noun} {at1} is {cX}{conj}{nY} is {at2}")),
    Construction("rel-subject", "rel", ("{X} {v} {rel} {Y}", "{X} {v} {rel} {oY}", "{X}, {rel} {Y}",
                                        "{aX} {v} {rel} {aY}")),
    Construction("rel-object-first", "rel", ("{rel} {Y} {v} {X}", "{rel} {Y}, {we} {see} {aX}",
                                             "{rel} {Y} there is {aX}")),
    Construction("rel-there-is", "rel", ("there is {aX} {rel} {Y}", "{we} {see} {aX} {rel} {Y}",
                                         "{we} {see} that {X} {v} {rel} {Y}")),
    Construction("rel-parked", "rel", ("{we} parked {X} {rel} {Y}", "{X} was parked {rel} {Y}")),
    Construction("rel-flanked", "rel", ("{Y} is flanked on the {s} by {X}",
                                        "{Y} is flanked to the {s} by {X}")),
    Construction("rel-has", "rel", ("{Y} has {X} on its {s}", "{Y} has {X} to its {s}",
                                    "{Y} has {X} on its {s} side")),
    Construction("seq-colon", "seq", ("{dir}: {bX}, {bY}", "{dir}: {X} {then} {Y}", "{dir}: {cX}, {cY}",
                                      "{dir}: {cX} {then} {cY}")),
    Construction("seq-trailing", "seq", ("{X} {then} {Y}, {dir}", "{bX}, {bY} ({dir})", "{X} {then} {Y}",
                                         "{cX} {noun} {then} {cY} {noun} {dir}")),
    Construction("seq-leading", "seq", ("{dir}, {we} {see} {aX} {then} {aY}",
                                        "{dir} there is {aX} {then} {aY}",
                                        "{dir} {we} {see} {X} {then} {Y}")),
    Construction("seq-first", "seq", ("{dir}, {ord1} {X}, {ord2} {Y}", "{ord1} {X}, {ord2} {Y}, {dir}",
                                      "{ord1} {X} and {ord2} {Y}", "{ord1} {X}, {ord2} {Y}",
                                      "{dir}, {X} comes first and {nY} second",
                                      "{dir}, {X} is first and {Y} is second",
                                      "{dir}, {X} is first and {nY} is second")),
    Construction("seq-ordinal", "seq", ("{dir}, the first {noun} is {cX} and the second is {cY}",
                                        "the first {noun} {dir} is {cX}, the second {cY}",
                                        "the first {noun} is {cX} and the second one is {cY}")),
    Construction("seq-comes-first", "seq", ("{X} comes first and {Y} second {dir}",
                                            "{X} comes first {dir}, then {Y}", "{X} comes before {Y} {dir}")),
    # Held out: new shapes built from the phrasings above.
    Construction("abs-we-see", "abs", ("{at1} {we} {see} {aX}{conj}{at2} {we} {see} {aY}",
                                       "{at1} {we} {see} {X}{conj}{at2} {Y}"), heldout=True),
    Construction("rel-you-will-find", "rel", ("you will find {X} {rel} {Y}",
                                              "look {rel} {Y} and you will find {X}"), heldout=True),
    Construction("seq-order-is", "seq", ("the order {dir} is {X} {then} {Y}",
                                         "the order {dir} is {cX}, {cY}"), heldout=True),
)

# One car, one side: "the white car is on the left" says it all, and people often say no
# more. Such a sentence cannot be paired (swapping the colour or the side changes its bag of
# words), so these train only and never reach an evaluation split, which keep the pair rule.
# Without them a lone clause reads as the first half of a two-car sentence: a 2-layer model
# put "THE WHITE CAR IS ON THE LEFT." at 0.00 positive. {s1} is the named car's side.
SINGLES: tuple[Construction, ...] = (
    Construction("one-subject", "abs", ("{X} {v} {at1}", "{X} is the one {at1}", "{X} is the {s1} one",
                                        "{X} is the {noun} {at1}", "{X} {v} further {s1}",
                                        "{X} {v} further to the {s1}", "{X} {v} {at1}, {we} {see}")),
    Construction("one-side-first", "abs", ("{at1} {v} {X}", "{at1} there is {aX}", "{at1} {we} {see} {aX}",
                                           "there is {aX} {at1}", "{we} {see} {aX} {at1}")),
    Construction("one-predicate", "abs", ("the {noun} {at1} is {cX}", "the {noun} {at1} is the {cX} one",
                                          "the {s1} {noun} is {cX}", "the one {at1} is {cX}",
                                          "of the two, the one further {s1} is {cX}",
                                          "the {noun} further {s1} is the {cX} one")),
    Construction("one-most", "abs", ("the {s1}most {noun} is {cX}", "{X} is the {s1}most one",
                                     "the {s1}most one is {cX}", "{X} is the {s1}most of the two")),
    Construction("one-terse", "abs", ("{bX} {s1}", "{bX} {at1}", "{s1}: {bX}", "{cX} {s1}", "{s1} - {bX}")),
    Construction("one-denied", "abs", ("{X} {neg} {at2}", "{X} is not the one {at2}",
                                       "{X} {neg} the {s2} one", "is {X} {at2}? no", "is {X} {at1}? yes",
                                       "which side is {X} on? the {s1}", "which side is {X} on? {at1}",
                                       "{X}? {at1}")),
    Construction("one-order", "abs", ("from the {s1}, {X} comes first", "from the {s2}, {X} comes second",
                                      "starting from the {s1}, {X} is first",
                                      "starting from the {s2}, {X} is second",
                                      "{X} comes first from the {s1}", "{X} comes last from the {s2}")),
)

# Words around the relation that never name a side. Scenes repeat both colour words so
# "which colour is mentioned first" is no shortcut; empty strings make a filler optional.
# A verb denied ("{X} {neg} on the left"); apostrophes drop in the tokenizer ("isnt").
NEGATED = ("is not", "isn't", "is not", "isn't", "is not parked", "isn't parked", "is not standing",
           "isn't sitting")
VERBS = ("is", "is", "sits", "stands", "is parked", "waits", "is standing", "is located", "can be seen",
         "appears", "is placed")
WE_SEE = (("we", "see"), ("i", "see"), ("you", "see"), ("you can", "see"), ("we", "have"), ("i can", "spot"),
          ("we", "notice"))
ADJECTIVES = ("small", "old", "new", "shiny", "rusty", "big", "fast", "dusty", "clean",
              "electric", "little", "tiny", "large", "vintage", "sporty", "parked", "family")
NOUNS = ("car", "car", "car", "car", "vehicle", "auto", "sedan", "hatchback")
OTHERS = ("the other one", "the other car", "the other")  # the second car, colour unnamed
OPENERS = ("in the picture,", "in this photo,", "i think", "as you can see,", "look,", "so", "here", "ok so",
           "well,", "in the image", "from where i stand,", "honestly,", "on the street,",
           "in the parking lot,", "there are two cars:", "two cars side by side:",
           "two cars are parked here,", "i noticed two cars parked side by side,")
CLOSERS = ("in the street", "at the station", "near the park", "in the garage", "outside the shop",
           "by the river", "in the yard", "as far as i can tell", "i think", "if you look closely",
           "in the photo", "this morning", "today")
# A scene is a form with one or two colour words that never belong to a car; both colours
# appear in either order, and one-colour scenes say white as often as black, so a colour word
# outside a car phrase tells nothing.
SCENE_FORMS_TWO = ("within a {c1} frame and {c2} border,", "under a {c1} sky with {c2} clouds,",
                   "by a {c1} fence and {c2} gate,", "in the {c1} and {c2} picture,",
                   "beside a {c1} sign with {c2} letters,", "on a {c1} road with {c2} markings,",
                   "next to a {c1} wall with {c2} windows,", "in a {c1} and {c2} photo,",
                   "near a {c1} gate and a {c2} fence,")
SCENE_FORMS_ONE = ("under a {c1} sky,", "with a {c1} building behind them,", "in front of a {c1} house,",
                   "on a {c1} street,", "next to a {c1} van,", "by a {c1} wall,", "under {c1} clouds,")
COLOURS = ("white", "black")
SCENES = tuple(form.format(c1=a, c2=b) for form in SCENE_FORMS_TWO for a, b in (COLOURS, COLOURS[::-1]))
SCENES += tuple(form.format(c1=c) for form in SCENE_FORMS_ONE for c in COLOURS)
