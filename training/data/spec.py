"""What a run trains on: where the data comes from and how texts become model inputs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from attnserve.training import data as datasets
from attnserve.training.text.tokenizer import TRUNCATION_SIDES
from attnserve.training.text.vocabulary import KINDS


@dataclass(frozen=True)
class DataSpec:
    """Where the data comes from and how texts become model inputs."""

    task: str = "car-order"
    path: str | None = None  # a CSV/JSONL/Parquet file or a Hugging Face dataset (local dir or hub name)
    split: str = "train"  # the split of a Hugging Face dataset to train on
    val_path: str | None = None  # a separate validation part (file, folder or hub name)
    val_split: str | None = None  # ... or another split of ``path``
    test_path: str | None = None
    test_split: str | None = None
    val_fraction: float | None = None  # carved out of training when no validation part; None: 0.1
    test_fraction: float | None = None
    text_column: str = "text"
    label_column: str = "label"
    group_column: str | None = None
    labels: tuple[str, ...] | None = None  # fixes the class names and their order
    ordinal: bool | None = None  # None: numeric labels are ordered, others not
    multi_label: bool = False  # a label cell holds any number of labels (training/data/multi_label.py)
    label_separator: str = "|"  # between the labels of a multi-label cell
    n_pairs: int | None = None  # a built-in task's size; None: the task's own default
    distractor_prefix: bool = False
    min_frequency: int = 1
    tokenizer: str = "wordlevel"  # wordlevel | wordpiece | bpe (vocabulary.KINDS)
    vocab_size: int = 0  # 0: no cap (wordlevel: every word seen min_frequency times)
    max_len: int | str | None = None  # tokens, or "auto"; None: the task's own, "auto" for files
    max_len_percentile: float = 95.0
    max_len_cap: int = 512
    truncation: str = "head"  # head | tail | head+tail
    seed: int = 0

    def __post_init__(self) -> None:
        if self.truncation not in TRUNCATION_SIDES:
            raise datasets.DataError(f"truncation must be one of {', '.join(TRUNCATION_SIDES)}")
        if isinstance(self.max_len, str) and self.max_len != "auto":
            raise datasets.DataError(f"max_len must be a number of tokens or 'auto', got {self.max_len!r}")
        if isinstance(self.max_len, int) and self.max_len < 2:
            raise datasets.DataError(f"max_len must be at least 2 tokens, got {self.max_len}")
        if self.tokenizer not in KINDS:
            raise datasets.DataError(f"tokenizer must be one of {', '.join(KINDS)}, got {self.tokenizer!r}")
        if self.vocab_size < 0 or self.min_frequency < 1:
            raise datasets.DataError("vocab_size must be >= 0 and min_frequency >= 1")
        if self.multi_label and self.path is None:
            raise datasets.DataError(
                f"--multi-label reads your own data (--data); the built-in task {self.task} is single-label"
            )
        if self.multi_label and self.ordinal:
            raise datasets.DataError("--ordinal ranks one label per text; multi-label texts have several")
        if self.multi_label and not self.label_separator:
            raise datasets.DataError("--label-separator must not be empty")


def _part(spec: DataSpec, path: str | None, split: str | None) -> datasets.Part | None:
    if path is None and split is None:
        return None
    assert spec.path is not None
    return datasets.Part(path or spec.path, split or "train")


def load_dataset(spec: DataSpec) -> datasets.Dataset:
    if spec.path is None:
        if spec.val_path or spec.test_path or spec.val_split or spec.test_split or spec.split != "train":
            raise datasets.DataError(
                "validation/test parts and --split apply to --data, not to built-in tasks"
            )
        return datasets.load_task(
            spec.task,
            seed=spec.seed,
            n_pairs=spec.n_pairs,
            distractor_prefix=spec.distractor_prefix,
            val_fraction=spec.val_fraction,
            test_fraction=spec.test_fraction,
        )
    layout = datasets.Layout(
        text_column=spec.text_column,
        label_column=spec.label_column,
        group_column=spec.group_column,
        labels=spec.labels,
        seed=spec.seed,
        val_fraction=0.1 if spec.val_fraction is None else spec.val_fraction,
        test_fraction=0.1 if spec.test_fraction is None else spec.test_fraction,
        multi_label=spec.multi_label,
        separator=spec.label_separator,
    )
    ds = datasets.load_parts(
        datasets.Part(spec.path, spec.split),
        val=_part(spec, spec.val_path, spec.val_split),
        test=_part(spec, spec.test_path, spec.test_split),
        layout=layout,
    )
    if spec.ordinal is not None and not spec.multi_label:
        ds = dataclasses.replace(ds, ordered=spec.ordinal)
    return datasets.with_distractor_prefix(ds, spec.seed) if spec.distractor_prefix else ds
