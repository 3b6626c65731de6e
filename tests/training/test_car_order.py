"""The car-order generator: its grammar's labels, the pair rule, the held-out splits, the hand-written set."""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import pytest

from attnserve.training.data import (
    HANDWRITTEN,
    HANDWRITTEN_BLIND,
    PHRASING_HELDOUT,
    TEMPLATE_HELDOUT,
    DataError,
    Dataset,
    Example,
    handwritten,
    load_task,
    phrasing,
    words,
)
from attnserve.training.data.car_order import (
    LABELS,
    CarOrderPair,
    Choices,
    choose,
    form_slots,
    generate_pairs,
    names_side,
    render,
)
from attnserve.training.data.tasks import DEFAULT_PAIRS, SINGLES_SHARE


@pytest.fixture(scope="module")
def car_order() -> Dataset:
    return load_task("car-order", seed=0)


@pytest.fixture(scope="module")
def pairs() -> list[CarOrderPair]:
    return generate_pairs(3000, seed=3)


def _plain(construction: phrasing.Construction) -> Choices:
    """The first form, the first seen entry of every lexicon, no fillers, sentence case."""
    form = construction.forms[0]
    lexemes: dict[str, str] = {}
    for slot in form_slots(form):
        entry = phrasing.LEXICONS[slot].seen[0]
        lexemes.update({"at1": entry, "at2": entry} if slot == "at" else {slot: entry})
    fillers = {"v": "is", "neg": "is not", "we": "we", "see": "see", "noun": "car", "adj_x": "", "adj_y": "",
               "other": "the other one", "scene": "", "opener": "", "closer": ""}
    return Choices(construction, form, lexemes, fillers, "sentence", ".", False)


# Read by hand: which side is the white car on? (car X is black, on the side given)
MEANINGS = {
    "abs-subject": ("right", "The black car is on the right and the white car is on the left.", 1),
    "abs-side-first": ("left", "On the left is the black car and on the right is the white car.", 0),
    "abs-there-is": ("right", "There is a black car on the right and a white car on the left.", 1),
    "abs-predicate": ("left", "The car on the left is black and the one on the right is white.", 0),
    "abs-terse": ("right", "Black car right, white car left.", 1),
    "abs-colon": ("left", "Left: black car, right: white car.", 0),
    "abs-most": ("right", "The rightmost car is black and the leftmost one is white.", 1),
    "abs-parked": ("left", "We parked the black car on the left and the white car on the right.", 0),
    "abs-not": ("left", "The black car is on the left, not on the right.", 0),
    "abs-denied": ("right", "The black car is not on the left and the white car is not on the right.", 1),
    "abs-cleft": ("left", "It's the black car, not the white one, that is on the left.", 0),
    "abs-the-one": (
        "right", "The black car is the one on the right and the white car is the one on the left.", 1
    ),
    "rel-subject": ("left", "The black car is left of the white car.", 0),
    "rel-object-first": ("right", "Right of the white car is the black car.", 1),
    "rel-there-is": ("left", "There is a black car left of the white car.", 0),
    "rel-parked": ("right", "We parked the black car right of the white car.", 1),
    "rel-flanked": ("left", "The white car is flanked on the left by the black car.", 0),
    "rel-has": ("left", "The white car has the black car on its left.", 0),
    "seq-colon": ("right", "From right to left: black car, white car.", 1),
    "seq-trailing": ("left", "The black car then the white car, from left to right.", 0),
    "seq-leading": ("right", "From right to left, we see a black car then a white car.", 1),
    "seq-first": ("left", "From left to right, first the black car, second the white car.", 0),
    "seq-ordinal": ("right", "From right to left, the first car is black and the second is white.", 1),
    "seq-comes-first": ("left", "The black car comes first and the white car second from left to right.", 0),
    "abs-we-see": ("right", "On the right we see a black car and on the left we see a white car.", 1),
    "rel-you-will-find": ("right", "You will find the black car right of the white car.", 1),
    "seq-order-is": ("right", "The order from right to left is the black car then the white car.", 1),
}


def test_every_construction_labels_the_white_car_side_correctly() -> None:
    assert {c.name for c in phrasing.CONSTRUCTIONS} == set(MEANINGS)
    for construction in phrasing.CONSTRUCTIONS:
        side, text, label = MEANINGS[construction.name]
        assert render(_plain(construction), "black", side) == (text, label), construction.name


NAMES_Y = ("{Y}", "{aY}", "{bY}", "{cY}", "{oY}")  # slots that name car Y's colour


def test_every_form_flips_its_label_with_the_colours_and_with_the_side() -> None:
    rng = random.Random(0)
    for construction in phrasing.CONSTRUCTIONS:
        for form in construction.forms:
            choices = choose(construction, "seen", rng)
            fillers = {**choices.fillers, "scene": ""}  # a scene names both colours
            choices = Choices(
                **{**choices.__dict__, "form": form, "lexemes": _plain_lexemes(form), "fillers": fillers}
            )
            text, label = render(choices, "white", "left")
            # "the other one" and "..., not on the right" name one colour
            colours = {"white", "black"} if any(y in form for y in NAMES_Y) else {"white"}
            assert label == 1 and colours == {"white", "black"} & set(words(text)), (form, text)
            assert render(choices, "black", "left")[1] == 0
            if names_side(choices):
                turned, turned_label = render(choices, "white", "right")
                assert turned_label == 0 and turned != text, (form, text)
            else:  # a sequence without a direction reads left to right and cannot be turned around
                with pytest.raises(ValueError, match="left to right"):
                    render(choices, "white", "right")


# One-car sentences, read by hand: (side of the black car X, text, label).
SINGLE_MEANINGS = {
    "one-subject": ("right", "The black car is on the right.", 1),
    "one-side-first": ("left", "On the left is the black car.", 0),
    "one-predicate": ("right", "The car on the right is black.", 1),
    "one-most": ("left", "The leftmost car is black.", 0),
    "one-terse": ("right", "Black car right.", 1),
    "one-order": ("left", "From the left, the black car comes first.", 0),
    "one-denied": ("right", "The black car is not on the left.", 1),
}

# Every form of the denials, questions and clefts, read by hand: each says the black car is on
# the left (the white car on the right, label 0), though most name the right side first.
DENIALS = {
    "abs-denied": (
        "The black car is not on the right and the white car is not on the left.",
        "The black car is not on the right, it's on the left.",
        "The black car is not on the right and it is on the left.",
        "Is the black car on the right? no, it's on the left.",
        "Is the black car on the right? no, on the left.",
        "Is the black car on the left? yes, and the white car is on the right.",
        "It's not the black car that is on the right, it's the white one.",
    ),
    "abs-cleft": (
        "It's the black car, not the white one, that is on the left.",
        "The black car, not the white one, is on the left.",
        "It is the black car and not the white one that is on the left.",
        "The black car and not the white one is on the left.",
    ),
    "one-denied": (
        "The black car is not on the right.",
        "The black car is not the one on the right.",
        "The black car is not the right one.",
        "Is the black car on the right? no.",
        "Is the black car on the left? yes.",
        "Which side is the black car on? the left.",
        "Which side is the black car on? on the left.",
        "The black car? on the left.",
    ),
}


def test_denials_questions_and_clefts_read_as_written_in_every_form() -> None:
    constructions = {c.name: c for c in (*phrasing.CONSTRUCTIONS, *phrasing.SINGLES)}
    for name, texts in DENIALS.items():
        construction = constructions[name]
        assert len(construction.forms) == len(texts), name
        for form, text in zip(construction.forms, texts, strict=True):
            choices = Choices(**{**_plain(construction).__dict__, "form": form})
            assert render(choices, "black", "left") == (text, 0), form


def test_one_car_sentences_label_the_white_car_side_correctly_in_every_form() -> None:
    assert {c.name for c in phrasing.SINGLES} == set(SINGLE_MEANINGS)
    for construction in phrasing.SINGLES:
        side, text, label = SINGLE_MEANINGS[construction.name]
        assert render(_plain(construction), "black", side) == (text, label), construction.name
        for form in construction.forms:
            plain = _plain(construction).__dict__
            choices = Choices(**{**plain, "form": form, "lexemes": _plain_lexemes(form)})
            text, label = render(choices, "white", "left")
            assert label == 1 and "black" not in words(text) and "white" in words(text), text
            assert render(choices, "black", "left")[1] == render(choices, "white", "right")[1] == 0


def test_one_car_sentences_train_only_and_never_use_held_out_phrasings(car_order: Dataset) -> None:
    n = DEFAULT_PAIRS["car-order"]
    singles = [ex for ex in car_order.train if ex.group >= n]
    assert len(singles) == 2 * round(n * SINGLES_SHARE)
    assert Counter(ex.label for ex in singles)[1] == len(singles) / 2
    couples: dict[int, list[Example]] = defaultdict(list)
    for ex in singles:
        couples[ex.group].append(ex)
    for a, b in couples.values():  # one side said of each colour: opposite labels
        a_words, b_words = Counter(words(a.text)), Counter(words(b.text))
        assert a.label != b.label and {*(a_words - b_words), *(b_words - a_words)} == {"white", "black"}
    evaluated = {" ".join(words(ex.text)) for name, split in car_order.splits().items() if name != "train"
                 for ex in split}  # fmt: skip
    assert not [ex.text for ex in singles if " ".join(words(ex.text)) in evaluated]
    assert all(ex.group < n for name in ("val", "test") for ex in car_order.splits()[name])
    phrases = _heldout_phrases()
    assert not [ex.text for ex in singles if any(_contains(ex.text, ph) for ph in phrases)]


def _plain_lexemes(form: str) -> dict[str, str]:
    lexemes: dict[str, str] = {}
    for slot in form_slots(form):
        entry = phrasing.LEXICONS[slot].seen[-1]
        lexemes.update({"at1": entry, "at2": entry} if slot == "at" else {slot: entry})
    return lexemes


def test_pairs_have_identical_bags_of_words_and_opposite_labels(pairs: list[CarOrderPair]) -> None:
    assert len(pairs) == 3000
    for pair in pairs:
        assert pair.first.text != pair.second.text
        assert Counter(words(pair.first.text)) == Counter(words(pair.second.text)), pair
        assert {pair.first.label, pair.second.label} == {0, 1}
        assert pair.first.group == pair.second.group
    texts = [ex.text for p in pairs for ex in (p.first, p.second)]
    assert len(set(texts)) == len(texts), "a sentence occurs twice"
    # Bags of words carry no label information: each bag occurs once with each label.
    labels_by_bag: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for p in pairs:
        for ex in (p.first, p.second):
            labels_by_bag[tuple(sorted(words(ex.text)))].append(ex.label)
    assert all(Counter(v)[0] == Counter(v)[1] for v in labels_by_bag.values())


def test_pairs_vary_in_shape_wording_and_style(pairs: list[CarOrderPair]) -> None:
    counts = Counter(p.template for p in pairs)
    assert set(counts) == {c.name for c in phrasing.CONSTRUCTIONS}
    assert max(counts.values()) - min(counts.values()) <= 1, "constructions take turns"
    firsts = [words(p.first.text) for p in pairs]
    both = [w for w in firsts if "white" in w and "black" in w]
    assert len(firsts) - len(both) > 50, "some sentences name one colour ('the other one')"
    assert min(Counter(w.index("white") < w.index("black") for w in both).values()) > 1000
    sides = Counter(w.index("left") < w.index("right") for w in firsts if "right" in w and "left" in w)
    assert min(sides.values()) > 500
    texts = [p.first.text for p in pairs]
    assert sum(t.islower() for t in texts) > 300 and sum(t.isupper() for t in texts) > 50
    assert sum(t.endswith(".") for t in texts) > 1000 and sum(t[-1].isalpha() for t in texts) > 300
    # Every seen phrasing and every filler turns up.
    joined = " " + " ".join(" ".join(w) for w in firsts) + " "
    for lexicon in phrasing.LEXICONS.values():
        for entry in lexicon.seen:
            for part in filter(words, entry.split("|")):
                for side, other in (("left", "right"), ("right", "left")):
                    if f" {' '.join(words(part.format(s=side, o=other)))} " in joined:
                        break
                else:
                    raise AssertionError(f"{lexicon.slot} entry {entry!r} never used")
    assert all(f" {' '.join(words(s))} " in joined for s in phrasing.SCENES)


def _heldout_phrases() -> list[tuple[str, ...]]:
    phrases = []
    for lexicon in phrasing.LEXICONS.values():
        for entry in lexicon.heldout:
            for part in entry.split("|"):
                for side, other in (("left", "right"), ("right", "left")):
                    phrases.append(tuple(words(part.format(s=side, o=other))))
    return phrases


def _contains(text: str, phrase: tuple[str, ...]) -> bool:
    w = words(text)
    return any(tuple(w[i : i + len(phrase)]) == phrase for i in range(len(w) - len(phrase) + 1))


def test_buckets_hold_out_whole_constructions_and_whole_phrasings(pairs: list[CarOrderPair]) -> None:
    heldout_constructions = {c.name for c in phrasing.CONSTRUCTIONS if c.heldout}
    assert len(heldout_constructions) >= 3
    phrases = _heldout_phrases()
    by_bucket = Counter(p.bucket for p in pairs)
    assert by_bucket["template"] > 300 and by_bucket["phrasing"] > 200
    for p in pairs:
        texts = (p.first.text, p.second.text)
        carries = [any(_contains(t, ph) for ph in phrases) for t in texts]
        assert (p.template in heldout_constructions) == (p.bucket == "template"), p
        assert all(carries) if p.bucket == "phrasing" else not any(carries), p


def test_load_task_splits_by_bucket_and_never_trains_on_held_out_material(car_order: Dataset) -> None:
    assert car_order.labels == LABELS == ("negative", "positive")
    assert set(car_order.extra) == {TEMPLATE_HELDOUT, PHRASING_HELDOUT, HANDWRITTEN, HANDWRITTEN_BLIND}
    assert car_order.extra[HANDWRITTEN] == handwritten.load("car-order", LABELS)
    assert car_order.extra[HANDWRITTEN_BLIND] == handwritten.load("car-order", LABELS, blind=True)
    written = car_order.extra[HANDWRITTEN] + car_order.extra[HANDWRITTEN_BLIND]
    pairs = generate_pairs(DEFAULT_PAIRS["car-order"], seed=0, exclude=[ex.text for ex in written])
    for split, bucket in ((TEMPLATE_HELDOUT, "template"), (PHRASING_HELDOUT, "phrasing")):
        expected = {ex.text for p in pairs if p.bucket == bucket for ex in (p.first, p.second)}
        assert {ex.text for ex in car_order.extra[split]} == expected and len(expected) > 300
    n = DEFAULT_PAIRS["car-order"]
    seen = {ex.text for name in ("train", "val", "test") for ex in car_order.splits()[name] if ex.group < n}
    assert seen == {ex.text for p in pairs if p.bucket == "seen" for ex in (p.first, p.second)}
    groups = {ex.group for name in ("train", "val", "test") for ex in car_order.splits()[name]}
    assert len(groups) >= 1000
    for name, examples in car_order.splits().items():
        if name not in (HANDWRITTEN, HANDWRITTEN_BLIND):  # generated splits hold whole pairs: labels balance
            assert Counter(ex.label for ex in examples)[0] == len(examples) / 2, name
    # No training sentence says a relation a held-out way.
    phrases = _heldout_phrases()
    assert not [t for t in seen if any(_contains(t, ph) for ph in phrases)]


def test_no_pair_straddles_splits(car_order: Dataset) -> None:
    split_of: dict[int, set[str]] = defaultdict(set)
    for name in ("train", "val", "test", TEMPLATE_HELDOUT, PHRASING_HELDOUT):
        for ex in car_order.splits()[name]:
            split_of[ex.group].add(name)
    assert all(len(names) == 1 for names in split_of.values())
    texts = {name: {" ".join(words(ex.text)) for ex in split} for name, split in car_order.splits().items()}
    for a in texts:
        for b in texts:
            assert a == b or not texts[a] & texts[b], (a, b)


def test_generation_is_seeded() -> None:
    a, b, c = (load_task("car-order", seed=s, n_pairs=300) for s in (7, 7, 8))
    assert a == b
    assert a.train != c.train


# ---------------------------------------------------------------- the hand-written set

README_EXAMPLES = {
    "the white car is left of the black car": "positive",
    "the white car is on the left and the black car on the right": "positive",
    "to the left of the black car is the white car": "positive",
    "On the left we see a black car and on the right we see a white car.": "negative",
}


@pytest.mark.parametrize("split", [HANDWRITTEN, HANDWRITTEN_BLIND])
def test_handwritten_sets_are_large_and_balanced(car_order: Dataset, split: str) -> None:
    examples = car_order.extra[split]
    assert len(examples) >= 100
    assert min(Counter(ex.label for ex in examples).values()) >= 0.45 * len(examples)
    lengths = [len(words(ex.text)) for ex in examples]
    assert min(lengths) <= 4 and max(lengths) >= 15
    assert len({ex.group for ex in examples}) == len(examples)


def test_the_development_set_holds_the_readme_examples_and_the_blind_set_shares_no_sentence(
    car_order: Dataset,
) -> None:
    labelled = {ex.text: LABELS[ex.label] for ex in car_order.extra[HANDWRITTEN]}
    assert all(labelled[text] == label for text, label in README_EXAMPLES.items())
    dev = {" ".join(words(text)) for text in labelled}
    assert not [ex.text for ex in car_order.extra[HANDWRITTEN_BLIND] if " ".join(words(ex.text)) in dev]


@pytest.mark.parametrize("blind", [False, True])
def test_handwritten_sentences_are_not_generated(blind: bool) -> None:
    pairs = generate_pairs(6000, seed=11)
    generated = {" ".join(words(ex.text)) for p in pairs for ex in (p.first, p.second)}
    written = [ex.text for ex in handwritten.load("car-order", LABELS, blind=blind)]
    copied = [text for text in written if " ".join(words(text)) in generated]
    # Short sentences can coincide by chance; a copy of the grammar would show up in numbers.
    assert len(copied) <= 0.1 * len(written), copied


def test_handwritten_loader_rejects_malformed_rows() -> None:
    with pytest.raises(DataError, match=r"line 2: expected 'label<TAB>text'"):
        handwritten.parse("positive\tfine\nno tab here\n", "t.tsv", LABELS)
    with pytest.raises(DataError, match=r"line 1: label 'maybe' is not one of negative, positive"):
        handwritten.parse("maybe\tthe white car\n", "t.tsv", LABELS)
    with pytest.raises(DataError, match=r"line 3: the same sentence as line 1"):
        handwritten.parse("positive\tA car\n# comment\nnegative\ta CAR\n", "t.tsv", LABELS)
    with pytest.raises(DataError, match="holds no sentences"):
        handwritten.parse("# only a comment\n\n", "t.tsv", LABELS)
    with pytest.raises(DataError, match="no hand-written sentences for task 'nope'"):
        handwritten.load("nope", LABELS)
    parsed = handwritten.parse("# c\n\npositive\tthe white car is left\n", "t.tsv", LABELS)
    assert [(ex.text, ex.label, ex.group) for ex in parsed] == [("the white car is left", 1, 3)]
