"""Users' data: CSV / TSV / JSONL / Parquet files and Hugging Face datasets.

Local files are read without Hugging Face ``datasets`` (see ``plain_files``). Folders and Hub
names go through ``datasets``, imported only then: a folder is parsed into memory with a
throw-away cache folder, so loading works offline and leaves nothing behind; only Hub
datasets use the regular Hugging Face cache (see ``hub``).

A data set comes from one source split by fractions, or from separate parts: a validation
and/or test file, or other splits of the same Hugging Face dataset. Whatever is not given
as a part is carved out of the training part, by group and stratified by label. With
``Layout.multi_label`` a label cell holds any number of labels (multi_label.py).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnserve.training.data.core import TAGGED, DataError, Dataset, Example, split_groups
from attnserve.training.data.hub import PROBE_TIMEOUT_S, load_from_hub
from attnserve.training.data.labels import LabelColumn, map_labels, rows
from attnserve.training.data.multi_label import DEFAULT_SEPARATOR, Tags, map_tags
from attnserve.training.data.plain_files import FORMATS, Columns, read_file

TRAIN = "train"


@dataclass(frozen=True)
class Layout:
    """Which columns to read and how to split: the options shared by every loader."""

    text_column: str = "text"
    label_column: str = "label"
    group_column: str | None = None
    labels: Sequence[str] | None = None  # fixes the class names and their order
    seed: int = 0
    val_fraction: float = 0.1
    test_fraction: float = 0.1
    multi_label: bool = False  # a label cell holds any number of labels (training/data/multi_label.py)
    separator: str = DEFAULT_SEPARATOR  # between the labels of a multi-label cell


@dataclass(frozen=True)
class Part:
    """Where one part of the data lives: a file, a folder or a Hub name, and a split of it."""

    path: str
    split: str = TRAIN
    config_name: str | None = None


@dataclass(frozen=True)
class _Read:
    columns: Columns
    source: str  # for messages
    name: str  # for the run's task name


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


def _read_folder(hf: Any, folder: Path, part: Part) -> tuple[Any, str]:
    """A ``datasets.Dataset`` from a saved dataset or a folder of data files, and where it came from."""
    source = f"split {part.split!r} of {folder}"
    with tempfile.TemporaryDirectory(prefix="attnserve-data-") as tmp:
        try:
            if (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file():
                loaded = hf.load_from_disk(str(folder), keep_in_memory=True)
                if not isinstance(loaded, hf.DatasetDict):
                    if part.split != TRAIN:
                        raise DataError(f"{folder} holds a single dataset with no splits; drop --split")
                    return loaded, str(folder)
                if part.split not in loaded:
                    raise DataError(f"{folder} has no split {part.split!r}; its splits: {', '.join(loaded)}")
                return loaded[part.split], source
            table = hf.load_dataset(
                str(folder), part.config_name, split=part.split, cache_dir=tmp, keep_in_memory=True
            )
        except DataError:
            raise
        except Exception as exc:
            raise DataError(f"cannot load {source}: {exc}") from exc
    return table, source


def _table_columns(table: Any, wanted: list[str]) -> Columns:
    """The wanted columns of a ``datasets.Dataset`` as lists; the table itself is not kept."""
    available = list(table.column_names)
    present = [name for name in dict.fromkeys(wanted) if name in available]
    names = {n: list(table.features[n].names) for n in present if hasattr(table.features[n], "names")}
    return Columns({n: table.data.column(n).to_pylist() for n in present}, available, names)


def _read(part: Part, layout: Layout, probe_timeout: float, cache_dir: str | None) -> _Read:
    wanted = [layout.label_column] + ([layout.group_column] if layout.group_column is not None else [])
    local = Path(part.path).expanduser()
    if local.is_file():
        if part.split != TRAIN:
            raise DataError(
                f"{local} is one file with no splits; --split names a split of a Hugging Face dataset"
            )
        return _Read(read_file(local, layout.text_column, wanted), str(local), local.stem)
    if not local.is_dir() and (part.path.startswith((".", "/", "~")) or local.suffix.lower() in FORMATS):
        raise FileNotFoundError(f"data file or folder not found: {local}")
    with _quiet_datasets() as hf:
        if local.is_dir():
            table, source = _read_folder(hf, local, part)
            name = local.name
        else:
            table = load_from_hub(hf, part.path, part.config_name, part.split, cache_dir, probe_timeout)
            source, name = f"split {part.split!r} of Hugging Face dataset {part.path!r}", part.path
        return _Read(_table_columns(table, [layout.text_column, *wanted]), source, name)


def _columns(read: _Read, layout: Layout) -> tuple[list[str], LabelColumn, list[Any] | None]:
    found, source = read.columns, read.source
    for column in (layout.text_column, layout.label_column, layout.group_column):
        if column is not None and column not in found.values:
            raise DataError(
                f"{source} has no column {column!r}; available columns: {', '.join(found.available)}"
            )
    texts = found.values[layout.text_column]
    if not texts:
        raise DataError(f"{source} holds no rows")
    bad = [i + 1 for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()]
    if bad:
        raise DataError(
            f"{source}: {len(bad)} row(s) have an empty or missing {layout.text_column!r} "
            f"(rows {rows(bad)}, counting from 1 after any header)"
        )
    names = found.class_names.get(layout.label_column)
    labels = LabelColumn(found.values[layout.label_column], source, names)
    groups = None if layout.group_column is None else found.values[layout.group_column]
    return texts, labels, groups


def _examples(texts: list[str], ids: Sequence[int | Tags], groups: list[Any] | None) -> list[Example]:
    """One part's rows: ``ids`` are class ids, or each row's label ids (multi-label)."""
    keys: dict[Any, int] = {}
    found = range(len(texts)) if groups is None else [keys.setdefault(g, len(keys)) for g in groups]
    return [
        Example(t, y, g) if isinstance(y, int) else Example(t, TAGGED, g, y)
        for t, y, g in zip(texts, ids, found, strict=True)
    ]


def _label_ids(
    parts: list[LabelColumn], layout: Layout
) -> tuple[tuple[str, ...], bool, Sequence[Sequence[int | Tags]]]:
    """Label names, whether they are ordered, and each part's rows' class ids (multi-label: label ids)."""
    if layout.multi_label:
        tagged = map_tags(parts, layout.label_column, layout.separator, layout.labels)
        return tagged.names, False, tagged.tags
    classes = map_labels(parts, layout.label_column, layout.labels)
    return classes.names, classes.ordered, classes.ids


def load_parts(
    train: Part,
    *,
    val: Part | None = None,
    test: Part | None = None,
    layout: Layout | None = None,
    probe_timeout: float = PROBE_TIMEOUT_S,
    cache_dir: str | None = None,
) -> Dataset:
    """Read the training part and any given validation/test parts; split off what is missing."""
    layout = layout or Layout()
    given = {"train": train, "val": val, "test": test}
    read = {k: _read(p, layout, probe_timeout, cache_dir) for k, p in given.items() if p is not None}
    columns = {k: _columns(r, layout) for k, r in read.items()}
    names, ordered, ids = _label_ids([c[1] for c in columns.values()], layout)
    examples = {
        k: _examples(texts, part_ids, groups)
        for (k, (texts, _, groups)), part_ids in zip(columns.items(), ids, strict=True)
    }
    train_ex, val_ex, test_ex = split_groups(
        examples["train"],
        seed=layout.seed,
        val_fraction=0.0 if val is not None else layout.val_fraction,
        test_fraction=0.0 if test is not None else layout.test_fraction,
    )
    val_ex = examples.get("val", val_ex)
    test_ex = examples.get("test", test_ex)
    if not val_ex:
        raise DataError("no validation data: give a validation fraction above 0 or a validation part")
    return Dataset(
        name=read["train"].name,
        labels=names,
        train=train_ex,
        val=val_ex,
        test=test_ex,
        ordered=ordered,
        multi_label=layout.multi_label,
    )


def load_file(path: str | Path, **layout: Any) -> Dataset:
    """Read a CSV, TSV, JSON/JSONL or Parquet file and split it into train/val/test.

    ``layout`` takes the fields of ``Layout``. Labels are the values that occur (see
    ``labels``). Rows sharing a ``group_column`` value stay in one split.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    return load_parts(Part(str(path)), layout=Layout(**layout))


def load_hf_dataset(
    name_or_path: str,
    *,
    split: str = TRAIN,
    config_name: str | None = None,
    cache_dir: str | Path | None = None,
    **layout: Any,
) -> Dataset:
    """Load one split of a Hugging Face dataset and divide it into train/val/test.

    ``name_or_path`` is a data file (see ``load_file``), a folder written by
    ``Dataset.save_to_disk``, a folder of data files, or a Hub name such as ``imdb``, which
    needs network access unless it is already in the local Hugging Face cache.
    """
    return load_parts(
        Part(name_or_path, split, config_name),
        layout=Layout(**layout),
        cache_dir=None if cache_dir is None else str(cache_dir),
    )
