"""The reviews stand-in: its shape, its seeding, its labels and the built-in tasks around it."""

from __future__ import annotations

import re
import statistics

import pytest

from attnserve.training.data import DataError, Example, load_task, words
from attnserve.training.data import reviews as reviews_module
from attnserve.training.data import reviews_words as w
from attnserve.training.data.reviews import FAVOURABLE, generate

SENTENCE = re.compile(r"[^.]+\.")


@pytest.fixture(scope="module")
def polarity() -> list[Example]:
    return generate(3000, seed=0, stars=False)


def test_reviews_have_the_shape_of_yelp_reviews(polarity: list[Example]) -> None:
    counts = [len(SENTENCE.findall(ex.text)) for ex in polarity]
    assert min(counts) == 2 and max(counts) == 5
    lengths = [len(words(ex.text)) for ex in polarity]
    assert 115 <= statistics.fmean(lengths) <= 145
    assert abs(sum(ex.label for ex in polarity) - 1500) < 100  # balanced, then 5% of labels flipped
    # Word types keep growing with size (names are composed), as in real reviews.
    types_small = {t for ex in polarity[:1000] for t in words(ex.text)}
    types_all = {t for ex in polarity for t in words(ex.text)}
    assert len(types_all) > 1.6 * len(types_small) > 2400


def test_negated_cue_words_are_common(polarity: list[Example]) -> None:
    text = " ".join(ex.text for ex in polarity)
    negated = sum(text.count(f" {verb} ") for verb in w.NEGATED_VERBS)
    cues = sum(1 for t in words(text) if t in set(w.POSITIVE) | set(w.NEGATIVE))
    assert 0.12 < negated / cues < 0.3


def test_five_percent_of_labels_are_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    noisy = generate(4000, seed=1, stars=True)
    monkeypatch.setattr(reviews_module, "LABEL_NOISE", 0.0)
    clean = generate(4000, seed=1, stars=True)
    assert [ex.text for ex in noisy] == [ex.text for ex in clean]
    flipped = sum(a.label != b.label for a, b in zip(noisy, clean, strict=True))
    assert 0.04 < flipped / 4000 < 0.06


def test_star_ratings_set_how_favourable_the_clauses_are() -> None:
    reviews = generate(4000, seed=1, stars=True)
    assert {ex.label for ex in reviews} == {0, 1, 2, 3, 4}
    assert FAVOURABLE[5] > FAVOURABLE[1]
    five_star_words = [ex for ex in reviews if ex.label == 4]
    one_star_words = [ex for ex in reviews if ex.label == 0]
    positive_cues = set(w.POSITIVE)

    def share(group: list) -> float:  # type: ignore[type-arg]
        tokens = [t for ex in group for t in words(ex.text)]
        cues = [t for t in tokens if t in positive_cues or t in set(w.NEGATIVE)]
        return sum(t in positive_cues for t in cues) / len(cues)

    assert share(five_star_words) > 0.7 > 0.3 > share(one_star_words)


def test_generation_is_seeded() -> None:
    a = generate(50, seed=3, stars=False)
    assert a == generate(50, seed=3, stars=False)
    assert a != generate(50, seed=4, stars=False)


def test_built_in_tasks() -> None:
    ds = load_task("reviews-polarity", n_pairs=1200, seed=0)
    assert ds.labels == ("negative", "positive") and not ds.ordered
    assert (len(ds.train), len(ds.val), len(ds.test)) == (1000, 100, 100)
    stars = load_task("reviews-stars", n_pairs=600, seed=0)
    assert stars.labels == ("1", "2", "3", "4", "5") and stars.ordered
    distracted = load_task("reviews-polarity", n_pairs=240, seed=0, distractor_prefix=True)
    plain = load_task("reviews-polarity", n_pairs=240, seed=0)
    assert distracted.name == "reviews-polarity+distractor"
    for before, after in zip(plain.test, distracted.test, strict=True):
        assert after.text.endswith(" " + before.text) and after.label == before.label
    with pytest.raises(DataError, match="at least 20 reviews"):
        load_task("reviews-stars", n_pairs=5)
