"""Users' data: CSV / TSV / JSONL / Parquet files and Hugging Face datasets.

Everything is read through Hugging Face ``datasets``. Local files are parsed into memory with
a throw-away cache folder, so loading works offline and leaves nothing behind; only Hub
datasets use the regular Hugging Face cache.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from attnserve.training.data.core import DataError, Dataset, Example, split_groups

BUILDERS = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet",
            ".pq": "parquet"}
_SHOWN = 5  # rows quoted in an error message


@dataclass(frozen=True)
class _Layout:
    """Which columns to read and how to split: the options shared by every loader."""

    text_column: str
    label_column: str
    group_column: str | None
    labels: Sequence[str] | None
    seed: int
    val_fraction: float
    test_fraction: float


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[Any]:
    """Import ``datasets`` lazily (it is slow to import) with its progress bars off."""
    import datasets

    was_disabled = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        yield datasets
    finally:
        if not was_disabled:
            datasets.enable_progress_bars()


def load_file(
    path: str | Path,
    *,
    text_column: str = "text",
    label_column: str = "label",
    group_column: str | None = None,
    labels: Sequence[str] | None = None,
    seed: int = 0,
    val_fraction: float = 0.1,
    test_fraction: float = 0.1,
) -> Dataset:
    """Read a CSV, TSV, JSON/JSONL or Parquet file and split it into train/val/test.

    String labels become ids in sorted order unless ``labels`` fixes the names and their
    order; integer labels are used as ids. Rows sharing a ``group_column`` value stay in
    one split. The split is stratified by label.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    builder = BUILDERS.get(path.suffix.lower())
    if builder is None:
        supported = ", ".join(sorted(BUILDERS))
        raise DataError(f"{path}: unsupported file type {path.suffix!r}; use one of {supported}")
    layout = _Layout(text_column, label_column, group_column, labels, seed, val_fraction, test_fraction)
    options = {"delimiter": "\t"} if path.suffix.lower() == ".tsv" else {}
    with _quiet_datasets() as hf, tempfile.TemporaryDirectory(prefix="attnserve-data-") as cache:
        try:
            table = hf.load_dataset(
                builder, data_files=str(path), split="train", cache_dir=cache, keep_in_memory=True, **options
            )
        except Exception as exc:  # parser errors come from pandas, pyarrow or datasets
            raise DataError(f"cannot read {path} as {builder}: {exc}") from exc
        return _to_dataset(table, str(path), path.stem, layout)


def load_hf_dataset(
    name_or_path: str,
    *,
    split: str = "train",
    config_name: str | None = None,
    text_column: str = "text",
    label_column: str = "label",
    group_column: str | None = None,
    labels: Sequence[str] | None = None,
    seed: int = 0,
    val_fraction: float = 0.1,
    test_fraction: float = 0.1,
    cache_dir: str | Path | None = None,
) -> Dataset:
    """Load one split of a Hugging Face dataset and divide it into train/val/test.

    ``name_or_path`` is a data file (see ``load_file``), a folder written by
    ``Dataset.save_to_disk``, a folder of data files, or a Hub name such as ``imdb``,
    which needs network access unless it is already in the local Hugging Face cache.
    """
    local = Path(name_or_path).expanduser()
    layout = _Layout(text_column, label_column, group_column, labels, seed, val_fraction, test_fraction)
    if local.is_file():
        return load_file(local, **asdict(layout))
    looks_local = name_or_path.startswith((".", "/", "~")) or local.suffix.lower() in BUILDERS
    if not local.is_dir() and looks_local:
        raise FileNotFoundError(f"data file or folder not found: {local}")
    with _quiet_datasets() as hf:
        if local.is_dir():
            with tempfile.TemporaryDirectory(prefix="attnserve-data-") as tmp:
                try:
                    if (local / "state.json").is_file() or (local / "dataset_dict.json").is_file():
                        loaded = hf.load_from_disk(str(local), keep_in_memory=True)
                        table = loaded[split] if isinstance(loaded, hf.DatasetDict) else loaded
                    else:
                        table = hf.load_dataset(str(local), config_name, split=split, cache_dir=tmp,
                                                keep_in_memory=True)
                except Exception as exc:
                    raise DataError(f"cannot load split {split!r} of the folder {local}: {exc}") from exc
                return _to_dataset(table, str(local), local.name, layout)
        try:
            table = hf.load_dataset(name_or_path, config_name, split=split,
                                    cache_dir=None if cache_dir is None else str(cache_dir))
        except Exception as exc:
            raise DataError(_hub_failure(name_or_path, exc)) from exc
        return _to_dataset(table, f"Hugging Face dataset {name_or_path!r}", name_or_path, layout)


def _hub_failure(name: str, exc: Exception) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ConnectionError) or any(w in text for w in ("ffline", "Connection", "reach")):
        return (f"{name!r} is not a local file or folder, and loading it from the Hugging Face Hub needs "
                f"network access, which is unavailable here ({text}). Download it where there is network, "
                "or pass a local CSV/JSONL/Parquet file or a save_to_disk folder instead.")
    return f"cannot load Hugging Face dataset {name!r}: {text}"


def _to_dataset(table: Any, source: str, name: str, layout: _Layout) -> Dataset:
    text_column, label_column, group_column = layout.text_column, layout.label_column, layout.group_column
    columns = list(table.column_names)
    for column in (text_column, label_column, group_column):
        if column is not None and column not in columns:
            raise DataError(f"{source} has no column {column!r}; available columns: {', '.join(columns)}")
    texts = table.data.column(text_column).to_pylist()
    raw_labels = table.data.column(label_column).to_pylist()
    feature = table.features[label_column]
    class_names = getattr(feature, "names", None)  # a ClassLabel column names its integer classes
    if not texts:
        raise DataError(f"{source} holds no rows")
    bad = [i + 1 for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()]
    if bad:
        raise DataError(f"{source}: {len(bad)} row(s) have an empty or missing {text_column!r} "
                        f"(rows {_rows(bad)}, counting from 1 after any header)")
    names = layout.labels if layout.labels is not None else class_names
    ids, names = label_ids(raw_labels, names, source, label_column)
    if group_column is None:
        groups = list(range(len(texts)))
    else:
        keys: dict[Any, int] = {}
        groups = [keys.setdefault(g, len(keys)) for g in table.data.column(group_column).to_pylist()]
    examples = [Example(t, y, g) for t, y, g in zip(texts, ids, groups, strict=True)]
    train, val, test = split_groups(
        examples, seed=layout.seed, val_fraction=layout.val_fraction, test_fraction=layout.test_fraction
    )
    return Dataset(name=name, labels=names, train=train, val=val, test=test)


def label_ids(
    raw: Sequence[Any], names: Sequence[str] | None, source: str, column: str
) -> tuple[list[int], tuple[str, ...]]:
    """Map label values to class ids; returns the ids and the class names in id order."""
    missing = [i + 1 for i, v in enumerate(raw) if v is None or (isinstance(v, float) and math.isnan(v))]
    if missing:
        raise DataError(f"{source}: {len(missing)} row(s) have no {column!r} (rows {_rows(missing)})")
    if names is not None and len(set(names)) != len(names):
        raise DataError(f"label names must be unique, got {list(names)}")
    if all(isinstance(v, str) for v in raw):
        given = tuple(names) if names is not None else tuple(sorted(set(raw)))
        index = {n: i for i, n in enumerate(given)}
        unknown = sorted(set(raw) - set(index))
        if unknown:
            raise DataError(f"{source}: labels {unknown[:_SHOWN]} in {column!r} are not among {list(given)}")
        return [index[v] for v in raw], given
    if all(isinstance(v, int | float) and float(v).is_integer() for v in raw):
        ints = [int(v) for v in raw]
        negative = [i + 1 for i, v in enumerate(ints) if v < 0]
        if negative:
            raise DataError(f"{source}: negative class ids in {column!r} (rows {_rows(negative)})")
        given = tuple(names) if names is not None else tuple(str(i) for i in range(max(ints) + 1))
        if max(ints) >= len(given):
            raise DataError(f"{source}: class id {max(ints)} in {column!r} but only {len(given)} label names")
        return ints, given
    kinds = sorted({type(v).__name__ for v in raw})
    raise DataError(f"{source}: {column!r} must hold only strings or only whole numbers, "
                    f"found {', '.join(kinds)}")


def _rows(rows: Sequence[int]) -> str:
    shown = ", ".join(str(r) for r in rows[:_SHOWN])
    return shown + (", ..." if len(rows) > _SHOWN else "")
