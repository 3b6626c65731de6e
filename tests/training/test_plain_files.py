"""Local files are read without Hugging Face ``datasets``, with the values ``datasets`` gave."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnserve.training.data import DataError, load_file
from attnserve.training.data.plain_files import read_file


def test_csv_numbers_are_inferred_per_column_and_texts_stay_strings(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text('text,stars,score,group\n123,1,1.0,a\n"two, quoted",5,,7\n45,3,2.5,b\n', encoding="utf-8")
    columns = read_file(path, "text", ["stars", "score", "group"])
    assert columns.values["text"] == ["123", "two, quoted", "45"]
    assert columns.values["stars"] == [1, 5, 3]
    assert columns.values["score"] == [1.0, None, 2.5]
    assert columns.values["group"] == ["a", "7", "b"]
    assert columns.available == ["text", "stars", "score", "group"]


def test_json_lines_and_json_arrays_give_the_same_rows(tmp_path: Path) -> None:
    rows = [{"text": f"review {i}", "label": "1" if i % 2 else "0", "extra": i} for i in range(40)]
    lines, array = tmp_path / "d.jsonl", tmp_path / "d.json"
    lines.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    array.write_text(json.dumps(rows, indent=1))
    for path in (lines, array):
        columns = read_file(path, "text", ["label"])
        # Strings that look like numbers stay strings in JSON: they name unordered classes.
        assert columns.values == {"text": [r["text"] for r in rows], "label": [r["label"] for r in rows]}
        assert columns.available == ["text", "label", "extra"]
    assert load_file(lines).labels == ("0", "1") and not load_file(lines).ordered


def test_malformed_files_name_the_file_and_the_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "fine", "label": 1}\n{"text": "cut\n')
    with pytest.raises(DataError, match=r"broken\.jsonl as JSON lines: line 2"):
        load_file(broken)
    scalars = tmp_path / "scalars.jsonl"
    scalars.write_text('"just a string"\n')
    with pytest.raises(DataError, match="line 1 is a JSON str, not an object"):
        load_file(scalars)
    wide = tmp_path / "wide.csv"
    wide.write_text("text,label\nfine,a\ntoo,many,fields\n")
    with pytest.raises(DataError, match=r"wide\.csv as csv: line 3 has 3 fields, the header 2"):
        load_file(wide)
    latin = tmp_path / "latin.csv"
    latin.write_bytes("text,label\ncaf\xe9,a\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"cannot read .*latin\.csv as csv"):
        load_file(latin)


def test_parquet_keeps_the_class_names_datasets_wrote(tmp_path: Path) -> None:
    import datasets

    features = datasets.Features(
        {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "neutral", "pos"])}
    )
    rows = [{"text": f"t {i}", "label": (0, 2)[i % 2]} for i in range(40)]
    path = tmp_path / "d.parquet"
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
    ds = load_file(path)
    assert ds.labels == ("neg", "pos") and not ds.ordered


def test_reading_local_files_leaves_datasets_and_pandas_unimported(tmp_path: Path) -> None:
    rows = [{"text": f"review number {i}", "label": i % 2} for i in range(30)]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (tmp_path / "d.csv").write_text("text,label\n" + "".join(f"{r['text']},{r['label']}\n" for r in rows))
    script = (
        "import sys\n"
        "from attnserve.training.data import load_file\n"
        f"for name in ('d.jsonl', 'd.csv'):\n"
        f"    ds = load_file({str(tmp_path)!r} + '/' + name)\n"
        "    assert len(ds.train) + len(ds.val) + len(ds.test) == 30 and ds.labels == ('0', '1')\n"
        "print(sorted(m for m in ('datasets', 'pandas', 'pyarrow') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stderr
