from __future__ import annotations

import csv
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from attnserve.training.data import (
    TASKS,
    DataError,
    Dataset,
    Example,
    add_distractor_prefix,
    load_file,
    load_hf_dataset,
    load_task,
    split_groups,
    word_dropout,
)


def test_generation_is_seeded() -> None:
    assert load_task("greetings-food", seed=2) == load_task("greetings-food", seed=2)
    assert load_task("greetings-food", seed=2) != load_task("greetings-food", seed=3)


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
