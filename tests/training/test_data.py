from __future__ import annotations

import csv
import json
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from attnserve.training.data import (
    TASKS,
    TEMPLATE_HELDOUT,
    DataError,
    Dataset,
    Example,
    add_distractor_prefix,
    load_file,
    load_hf_dataset,
    load_task,
    split_groups,
    word_dropout,
    words,
)
from attnserve.training.data.car_order import TEMPLATES, generate_pairs, render
from attnserve.training.data.tasks import DEFAULT_PAIRS


@pytest.fixture(scope="module")
def car_order() -> Dataset:
    return load_task("car-order", seed=0)


# ---------------------------------------------------------------- car-order generator


# Read by hand: which side is the white car on in each template's sentence?
MEANINGS = {
    "abs-is-on": ("The black car is on the left and the white car is on the right.", 0),
    "abs-side-first": ("On the left is the black car, and on the right the white car.", 0),
    "abs-there-is": ("There is a black car on the left and a white car on the right.", 0),
    "abs-side-taken": ("The left side is taken by the black car, the right side by the white car.", 0),
    "abs-can-be-seen": ("A black car can be seen on the left, and a white car on the right.", 0),
    "abs-mixed-order": ("On the left there is a black car, and the white car is on the right.", 0),
    "abs-the-one": ("The black car is the one on the left, while the white car is the one on the right.", 0),
    "abs-predicate": ("The car on the left is black and the car on the right is white.", 0),
    "abs-we-parked": ("We parked the black car on the left and the white car on the right.", 0),
    "abs-was-parked": ("The black car was parked on the left and the white car was parked on the right.", 0),
    "rel-to-the-of": ("The black car is to the right of the white car.", 1),
    "rel-side-of": ("The black car is parked on the right side of the white car.", 1),
    "rel-seen-from": ("Seen from the street, the black car is right of the white car.", 1),
    "rel-fronted": ("To the right of the black car is the white car.", 0),
    "rel-flanked": ("The black car is flanked on the right by the white car.", 0),
    "held-we-see": ("On the left we see a black car and on the right we see a white car.", 0),
    "held-whereas": ("The black car sits on the left, whereas the white car sits on the right.", 0),
    "held-placed": ("The black car is placed to the right of the white car.", 1),
}


def test_every_template_labels_the_white_car_side_correctly() -> None:
    slots = {
        "c1": "black",
        "c2": "white",
        "p1": "left",
        "p2": "right",
        "rel": "right",
        "a1": "",
        "a2": "",
        "verb": "is",
        "place": "",
        "scene": "",
    }
    assert {t.name for t in TEMPLATES} == set(MEANINGS)
    for template in TEMPLATES:
        assert render(template, slots) == MEANINGS[template.name], template.name


def test_pairs_have_identical_bags_of_words_and_opposite_labels() -> None:
    pairs = generate_pairs(600, seed=3)
    assert len(pairs) == 600
    for pair in pairs:
        assert pair.first.text != pair.second.text
        assert Counter(words(pair.first.text)) == Counter(words(pair.second.text))
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


def test_templates_are_varied_and_used_evenly() -> None:
    assert len({t.name for t in TEMPLATES if not t.heldout}) >= 12
    assert len({t.name for t in TEMPLATES if t.heldout}) >= 2
    counts = Counter(p.template for p in generate_pairs(len(TEMPLATES) * 10, seed=1))
    assert set(counts.values()) == {10}
    pairs = generate_pairs(600, seed=0)
    # Both cars named in either order and both sides named in either order.
    firsts = [words(p.first.text) for p in pairs]
    first_colour = Counter(w.index("white") < w.index("black") for w in firsts)
    assert min(first_colour.values()) > 100
    sides = Counter(w.index("left") < w.index("right") for w in firsts if "right" in w and "left" in w)
    assert min(sides.values()) > 100


def test_default_task_has_at_least_500_pairs_and_balanced_labels(car_order: Dataset) -> None:
    assert car_order.labels == ("negative", "positive")
    groups = {ex.group for split in car_order.splits().values() for ex in split}
    assert len(groups) >= 500
    for name, split in car_order.splits().items():
        assert split, name
        assert Counter(ex.label for ex in split)[0] == len(split) / 2, name


def test_no_pair_straddles_splits(car_order: Dataset) -> None:
    split_of: dict[int, set[str]] = defaultdict(set)
    members: Counter[int] = Counter()
    for name, split in car_order.splits().items():
        for ex in split:
            split_of[ex.group].add(name)
            members[ex.group] += 1
    assert all(len(names) == 1 for names in split_of.values())
    assert set(members.values()) == {2}
    texts = {name: {ex.text for ex in split} for name, split in car_order.splits().items()}
    for a in texts:
        for b in texts:
            assert a == b or not texts[a] & texts[b], (a, b)


def test_heldout_templates_never_reach_training(car_order: Dataset) -> None:
    heldout_names = {t.name for t in TEMPLATES if t.heldout}
    pairs = generate_pairs(DEFAULT_PAIRS["car-order"], seed=0)
    heldout_texts = {ex.text for p in pairs if p.template in heldout_names for ex in (p.first, p.second)}
    assert heldout_texts == {ex.text for ex in car_order.extra[TEMPLATE_HELDOUT]}
    seen = {ex.text for name in ("train", "val", "test") for ex in car_order.splits()[name]}
    assert seen.isdisjoint(heldout_texts)
    assert seen | heldout_texts == {ex.text for p in pairs for ex in (p.first, p.second)}
    # Words only the held-out templates use never occur in training.
    train_words = {w for ex in car_order.train for w in words(ex.text)}
    assert {"whereas", "see", "placed"}.isdisjoint(train_words)


def test_generation_is_seeded() -> None:
    a, b, c = load_task("car-order", seed=7), load_task("car-order", seed=7), load_task("car-order", seed=8)
    assert a == b
    assert a.train != c.train
    assert load_task("greetings-food", seed=2) == load_task("greetings-food", seed=2)


def test_distractor_prefix_keeps_label_and_prefixes_another_sentence_of_the_split() -> None:
    plain = load_task("car-order", seed=5, n_pairs=200)
    prefixed = load_task("car-order", seed=5, n_pairs=200, distractor_prefix=True)
    assert prefixed.name == "car-order+distractor"
    for name, split in plain.splits().items():
        texts = {ex.text for ex in split}
        out = prefixed.splits()[name]
        assert len(out) == len(split)
        for original, ex in zip(split, out, strict=True):
            assert (ex.label, ex.group) == (original.label, original.group)
            assert ex.text.endswith(" " + original.text)
            prefix = ex.text[: -len(original.text) - 1]
            assert prefix != original.text and prefix in texts


def test_add_distractor_prefix_works_on_any_examples() -> None:
    examples = [Example("hello there", 1, 0), Example("the soup is hot", 0, 1), Example("hi", 1, 2)]
    out = add_distractor_prefix(examples, random.Random(0))
    for original, ex in zip(examples, out, strict=True):
        prefix, _, rest = ex.text.partition(" " + original.text)
        assert rest == "" and prefix in {e.text for e in examples} - {original.text}
        assert ex.label == original.label
    with pytest.raises(DataError, match="at least 2 different texts"):
        add_distractor_prefix([Example("same", 0, 0), Example("same", 1, 1)], random.Random(0))


def test_greetings_food_is_small_balanced_and_stratified() -> None:
    ds = load_task("greetings-food")
    assert {"car-order", "greetings-food", "reviews-polarity", "reviews-stars"} == set(TASKS)
    assert ds.labels == ("food", "greeting")
    everything = [ex for split in ds.splits().values() for ex in split]
    assert len(everything) == 80 and Counter(ex.label for ex in everything) == {0: 40, 1: 40}
    for split in (ds.val, ds.test):
        assert Counter(ex.label for ex in split) == {0: 4, 1: 4}
    assert load_task("greetings-food", n_pairs=600).num_classes == 2
    with pytest.raises(DataError, match="between 1 and"):
        load_task("greetings-food", n_pairs=100_000)
    with pytest.raises(DataError, match=r"unknown task 'nope'.*car-order"):
        load_task("nope")


def test_split_groups_validates_fractions_and_sizes() -> None:
    examples = [Example(f"t{i}", i % 2, i) for i in range(4)]
    with pytest.raises(DataError, match="leave room"):
        split_groups(examples, seed=0, val_fraction=0.5, test_fraction=0.5)
    with pytest.raises(DataError, match="too few"):
        split_groups(examples, seed=0, val_fraction=0.1, test_fraction=0.1)
    train, val, test = split_groups(examples * 5, seed=0, val_fraction=0.0, test_fraction=0.0)
    assert (len(train), val, test) == (20, [], [])


# ---------------------------------------------------------------- word dropout


def test_word_dropout_replaces_only_real_unprotected_tokens() -> None:
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 50, size=(64, 40))
    ids[:, 0] = 2  # a [CLS] position
    mask = np.ones_like(ids)
    mask[:, 30:] = 0
    ids[:, 30:] = 0
    before = ids.copy()
    out = word_dropout(ids, mask, 0.3, unk_id=1, rng=np.random.default_rng(1), keep_ids={2})
    assert np.array_equal(ids, before), "the input must not change"
    assert out.dtype == np.int64 and out.shape == ids.shape
    assert np.all(out[:, 0] == 2) and np.all(out[:, 30:] == 0)
    changed = out != ids
    assert np.all(out[changed] == 1)
    rate = changed[:, 1:30].mean()
    assert 0.25 < rate < 0.35
    assert np.array_equal(word_dropout(ids, mask, 0.0, 1, np.random.default_rng(2)), ids)
    with pytest.raises(ValueError, match="probability"):
        word_dropout(ids, mask, 1.0, 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="shape"):
        word_dropout(ids, mask[:, :5], 0.1, 1, np.random.default_rng(0))


# ---------------------------------------------------------------- users' files


LABEL_CYCLE = ("spam", "ham", "eggs")
ROWS: list[dict[str, Any]] = [
    {"text": f"sentence number {i}", "label": LABEL_CYCLE[i % 3], "pair": i // 2} for i in range(60)
]


def _write_csv(path: Path, rows: list[dict[str, Any]], delimiter: str = ",") -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), delimiter=delimiter)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _all(ds: Dataset) -> list[Example]:
    return ds.train + ds.val + ds.test


def test_csv_with_string_labels(tmp_path: Path) -> None:
    rows = [{**r, "text": r["text"] + ', with "quotes", commas'} for r in ROWS]
    ds = load_file(_write_csv(tmp_path / "reviews.csv", rows))
    assert ds.name == "reviews" and ds.labels == ("eggs", "ham", "spam")
    got = {(ex.text, ds.labels[ex.label]) for ex in _all(ds)}
    assert got == {(r["text"], r["label"]) for r in rows}
    assert (len(ds.train), len(ds.val), len(ds.test)) == (48, 6, 6)
    assert all(len({ex.label for ex in split}) == 3 for split in (ds.val, ds.test)), "stratified by label"


def test_tsv_and_fixed_label_order(tmp_path: Path) -> None:
    ds = load_file(_write_csv(tmp_path / "d.tsv", ROWS, delimiter="\t"), labels=["spam", "ham", "eggs"])
    assert ds.labels == ("spam", "ham", "eggs")
    assert all(ds.labels[ex.label] == ROWS[int(ex.text.split()[-1])]["label"] for ex in _all(ds))
    with pytest.raises(DataError, match=r"\['eggs'\] in 'label' are not among"):
        load_file(tmp_path / "d.tsv", labels=["spam", "ham"])


def test_jsonl_with_custom_columns_and_groups(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    lines = (json.dumps({"body": r["text"], "y": r["label"], "pair": r["pair"]}) for r in ROWS)
    path.write_text("\n".join(lines))
    ds = load_file(path, text_column="body", label_column="y", group_column="pair", seed=3)
    assert len(_all(ds)) == 60
    split_of = {ex.text: name for name, split in ds.splits().items() for ex in split}
    for i in range(0, 60, 2):
        assert split_of[f"sentence number {i}"] == split_of[f"sentence number {i + 1}"]


def test_parquet_with_integer_labels(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    table = pa.Table.from_pylist([{"text": r["text"], "label": i % 2} for i, r in enumerate(ROWS)])
    pq.write_table(table, path)
    ds = load_file(path)
    assert ds.labels == ("0", "1")
    assert all(ex.label == int(ex.text.split()[-1]) % 2 for ex in _all(ds))
    named = load_file(path, labels=["odd-one-out", "other"])
    assert named.labels == ("odd-one-out", "other")


def test_hugging_face_local_folder_and_file(tmp_path: Path) -> None:
    import datasets

    folder = tmp_path / "saved"
    saved = datasets.Dataset.from_list([{"text": r["text"], "label": r["label"]} for r in ROWS])
    saved.save_to_disk(str(folder))
    ds = load_hf_dataset(str(folder))
    assert ds.labels == ("eggs", "ham", "spam") and len(_all(ds)) == 60
    ds = load_hf_dataset(str(_write_csv(tmp_path / "d.csv", ROWS)))
    assert len(_all(ds)) == 60


def test_missing_column_names_the_column_and_the_available_ones(tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "d.csv", ROWS)
    with pytest.raises(DataError, match=r"no column 'sentence'; available columns: text, label, pair"):
        load_file(path, text_column="sentence")
    with pytest.raises(DataError, match=r"no column 'target'"):
        load_file(path, label_column="target")


def test_bad_rows_and_files_are_rejected_clearly(tmp_path: Path) -> None:
    empty = _write_csv(
        tmp_path / "e.csv",
        [
            {"text": "fine", "label": "a"},
            {"text": "   ", "label": "b"},
            {"text": "", "label": "a"},
            {"text": "ok", "label": "b"},
        ],
    )
    with pytest.raises(DataError, match=r"2 row\(s\) have an empty or missing 'text' \(rows 2, 3"):
        load_file(empty)
    unlabelled = _write_csv(tmp_path / "u.csv", [{"text": "fine", "label": "a"}, {"text": "x", "label": ""}])
    with pytest.raises(DataError, match=r"1 row\(s\) have no 'label' \(rows 2\)"):
        load_file(unlabelled)
    one_class = _write_csv(tmp_path / "o.csv", [{"text": f"t{i}", "label": "a"} for i in range(20)])
    with pytest.raises(DataError, match="at least 2 labels"):
        load_file(one_class)
    fractional = tmp_path / "f.jsonl"
    fractional.write_text('{"text": "a", "label": 0.5}\n{"text": "b", "label": 1.0}\n')
    with pytest.raises(DataError, match="only strings or only whole numbers"):
        load_file(fractional)
    (tmp_path / "d.xlsx").write_text("x")
    with pytest.raises(DataError, match=r"unsupported file type '\.xlsx'"):
        load_file(tmp_path / "d.xlsx")
    with pytest.raises(FileNotFoundError, match=r"nope\.csv"):
        load_file(tmp_path / "nope.csv")
    with pytest.raises(FileNotFoundError, match=r"nope\.parquet"):
        load_hf_dataset(str(tmp_path / "nope.parquet"))


def test_hub_name_offline_says_network_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    # The same switch as HF_HUB_OFFLINE=1, set after import: no request leaves this machine.
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(DataError, match="Hugging Face Hub needs network access") as info:
        load_hf_dataset("stanfordnlp/imdb")
    assert "stanfordnlp/imdb" in str(info.value)
