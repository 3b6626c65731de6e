"""Users' data: labels as they occur, split control, Hub names offline, distractors on any data."""

from __future__ import annotations

import csv
import json
import logging
import socket
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from attnserve.training.data import DataError, Dataset, Layout, Part, load_file, load_hf_dataset, load_parts
from attnserve.training.run.pipeline import DataSpec, load_dataset


def _csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _rows(n: int, labels: tuple[Any, ...], start: int = 0) -> list[dict[str, Any]]:
    return [{"text": f"review number {i}", "label": labels[i % len(labels)]} for i in range(start, start + n)]


def _everything(ds: Dataset) -> list[Any]:
    return ds.train + ds.val + ds.test


def test_integer_labels_are_the_values_that_occur_named_by_themselves(tmp_path: Path) -> None:
    ds = load_file(_csv(tmp_path / "stars.csv", _rows(60, (1, 3, 5))))
    assert ds.labels == ("1", "3", "5") and ds.ordered
    for ex in _everything(ds):
        assert ds.labels[ex.label] == str((1, 3, 5)[int(ex.text.split()[-1]) % 3])
    text_labels = load_file(_csv(tmp_path / "words.csv", _rows(60, ("bad", "good"))))
    assert text_labels.labels == ("bad", "good") and not text_labels.ordered


def test_class_label_columns_keep_the_named_classes_that_occur(tmp_path: Path) -> None:
    import datasets

    features = datasets.Features(
        {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "neutral", "pos"])}
    )
    rows = [{"text": f"t {i}", "label": (0, 2)[i % 2]} for i in range(40)]
    datasets.Dataset.from_list(rows, features=features).save_to_disk(str(tmp_path / "saved"))
    ds = load_hf_dataset(str(tmp_path / "saved"))
    assert ds.labels == ("neg", "pos") and not ds.ordered
    assert {ds.labels[ex.label] for ex in _everything(ds)} == {"neg", "pos"}


def test_pre_split_files_are_used_as_they_are(tmp_path: Path) -> None:
    train = _csv(tmp_path / "train.csv", _rows(40, ("a", "b")))
    val = _csv(tmp_path / "val.csv", _rows(10, ("a", "b"), start=100))
    test = tmp_path / "test.jsonl"
    test.write_text("\n".join(json.dumps(r) for r in _rows(8, ("a", "b", "c"), start=200)))
    ds = load_parts(Part(str(train)), val=Part(str(val)), test=Part(str(test)))
    assert (len(ds.train), len(ds.val), len(ds.test)) == (40, 10, 8)
    assert {e.text for e in ds.val} == {r["text"] for r in _rows(10, ("a", "b"), start=100)}
    # 'c' occurs only in the test file: it is a class (the report will say training lacks it).
    assert ds.labels == ("a", "b", "c")
    only_val = load_parts(Part(str(train)), val=Part(str(val)), layout=Layout(test_fraction=0.25))
    assert (len(only_val.train), len(only_val.val), len(only_val.test)) == (30, 10, 10)


def test_fractions_and_the_need_for_validation(tmp_path: Path) -> None:
    path = _csv(tmp_path / "d.csv", _rows(80, ("x", "y")))
    ds = load_file(path, val_fraction=0.25, test_fraction=0.0)
    assert (len(ds.train), len(ds.val), len(ds.test)) == (60, 20, 0)
    with pytest.raises(DataError, match="no validation data"):
        load_file(path, val_fraction=0.0)


def test_hugging_face_splits_by_name(tmp_path: Path) -> None:
    import datasets

    parts = {
        "train": _rows(40, ("a", "b")),
        "validation": _rows(12, ("a", "b"), start=100),
        "test": _rows(6, ("a", "b"), start=200),
    }
    dd = datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in parts.items()})
    dd.save_to_disk(str(tmp_path / "dd"))
    folder = str(tmp_path / "dd")
    ds = load_dataset(DataSpec(path=folder, val_split="validation", test_split="test"))
    assert (len(ds.train), len(ds.val), len(ds.test)) == (40, 12, 6)
    on_test = load_dataset(DataSpec(path=folder, split="test", val_fraction=0.5, test_fraction=0.0))
    assert len(on_test.train) + len(on_test.val) == 6
    with pytest.raises(DataError, match=r"no split 'dev'; its splits: train, validation, test"):
        load_dataset(DataSpec(path=folder, val_split="dev"))
    table = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(parts["train"]), table)
    with pytest.raises(DataError, match="one file with no splits"):
        load_dataset(DataSpec(path=str(table), split="validation"))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_hub_name_fails_fast_with_a_way_to_provide_local_files(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    with caplog.at_level(logging.DEBUG), pytest.raises(DataError) as info:
        load_hf_dataset("someone/reviews", cache_dir=None)
    message = str(info.value)
    assert "needs network access: cannot reach http://127.0.0.1" in message
    assert "save_to_disk('someone_reviews')" in message and "local CSV/JSONL/Parquet" in message
    assert "Retrying" not in caplog.text  # the library's own 5-try back-off never ran

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match="HF_HUB_OFFLINE switches off"):
        load_hf_dataset("someone/reviews")


def test_distractor_prefix_works_with_users_data(tmp_path: Path) -> None:
    path = _csv(tmp_path / "d.csv", _rows(50, ("a", "b")))
    plain = load_dataset(DataSpec(path=str(path)))
    prefixed = load_dataset(DataSpec(path=str(path), distractor_prefix=True))
    assert prefixed.name == "d+distractor"
    for name, split in plain.splits().items():
        texts = {e.text for e in split}
        for before, after in zip(split, prefixed.splits()[name], strict=True):
            prefix, _, rest = after.text.partition(" " + before.text)
            assert rest == "" and prefix in texts - {before.text} and after.label == before.label


def test_data_spec_refuses_bad_settings() -> None:
    with pytest.raises(DataError, match="truncation must be one of head, tail, head\\+tail"):
        DataSpec(truncation="middle")
    with pytest.raises(DataError, match="'auto'"):
        DataSpec(max_len="longest")
    with pytest.raises(DataError, match="apply to --data"):
        load_dataset(DataSpec(task="greetings-food", val_split="validation"))
