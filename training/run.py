"""One training run end to end: data -> tokenizer -> model -> fit -> evaluate -> run directory."""

from __future__ import annotations

import dataclasses
import logging
import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from attnserve.training import data as datasets
from attnserve.training.data.encoding import encode_texts
from attnserve.training.data_report import (
    DataReport,
    auto_max_len,
    check_classes,
    check_lengths,
    check_vocabulary,
)
from attnserve.training.memory import release_unused_memory
from attnserve.training.models import FAMILIES, build_model
from attnserve.training.resume import RESUME
from attnserve.training.run_outputs import Evaluation, evaluate_splits, write_run
from attnserve.training.tokenizer import (
    TRUNCATION_SIDES,
    UNK_ID,
    build_tokenizer,
    save_tokenizer,
    token_lengths,
)
from attnserve.training.trainer import History, Split, TrainConfig, fit, pick_device, seed_everything
from attnserve.training.vocabulary import KINDS

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    metrics: dict[str, Any]
    history: History = field(repr=False)


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
    )
    ds = datasets.load_parts(
        datasets.Part(spec.path, spec.split),
        val=_part(spec, spec.val_path, spec.val_split),
        test=_part(spec, spec.test_path, spec.test_split),
        layout=layout,
    )
    if spec.ordinal is not None:
        ds = dataclasses.replace(ds, ordered=spec.ordinal)
    return datasets.with_distractor_prefix(ds, spec.seed) if spec.distractor_prefix else ds


def resolve_max_len(
    spec: DataSpec, family: str, overrides: dict[str, Any], train_lengths: np.ndarray
) -> tuple[int, str]:
    """max_len and where it came from: set, auto (a percentile of training lengths), a default."""
    requested = spec.max_len if spec.max_len is not None else overrides.get("max_len")
    if requested is None and spec.path is not None:
        requested = "auto"
    if requested == "auto":
        value = auto_max_len(train_lengths, spec.max_len_percentile, spec.max_len_cap)
        return value, f"auto: p{spec.max_len_percentile:g} of training lengths, cap {spec.max_len_cap}"
    if requested is not None:
        return int(requested), "set"
    task_default = datasets.DEFAULTS[spec.task].max_len if spec.task in datasets.DEFAULTS else None
    if task_default is not None:
        return task_default, f"{spec.task} default"
    defaults: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(FAMILIES[family].config_cls)}
    return int(defaults["max_len"]), "model default"


def encode(tok: Tokenizer, examples: list[datasets.Example], max_len: int, truncation: str) -> Split:
    """One split as an [N, max_len] int32 id matrix and lengths, encoded a chunk at a time."""
    enc = encode_texts(tok, [e.text for e in examples], max_len, truncation)
    labels = np.fromiter((e.label for e in examples), dtype=np.int64, count=len(examples))
    groups = np.fromiter((e.group for e in examples), dtype=np.int64, count=len(examples))
    return Split(enc.input_ids, enc.lengths, labels, groups)


def train_run(
    out_dir: str | Path,
    family: str,
    model_overrides: dict[str, Any],
    train_cfg: TrainConfig,
    data_spec: DataSpec,
) -> RunResult:
    run_dir = Path(out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    ds = load_dataset(data_spec)
    add_cls = model_overrides.get("pooling") == "cls"
    train_texts = [e.text for e in ds.train]
    tokenizer = build_tokenizer(
        train_texts,
        kind=data_spec.tokenizer,
        min_frequency=data_spec.min_frequency,
        add_cls=add_cls,
        vocab_size=data_spec.vocab_size,
    )
    evaluated = {"val": ds.val, "test": ds.test, **ds.extra}
    lengths = {"train": token_lengths(tokenizer, train_texts)}
    lengths |= {k: token_lengths(tokenizer, [e.text for e in v]) for k, v in evaluated.items() if v}
    max_len, how = resolve_max_len(data_spec, family, model_overrides, lengths["train"])
    truncation = data_spec.truncation

    report = DataReport()
    check_lengths(report, lengths, max_len, truncation, how)
    splits = {"train": encode(tokenizer, ds.train, max_len, truncation)}
    splits |= {k: encode(tokenizer, v, max_len, truncation) for k, v in evaluated.items() if v}
    check_vocabulary(
        report,
        tokenizer,
        train_texts,
        {k: (s.input_ids, s.lengths) for k, s in splits.items() if k in ("train", "val")},
        data_spec.vocab_size,
    )
    check_classes(report, ds.labels, [e.label for e in ds.train], train_cfg.class_weights != "none")
    log.info("%s: %s", ds.name, ", ".join(f"{len(s):,} {k}" for k, s in splits.items()))
    for line in report.notes:
        log.info("%s", line)
    for warning in report.warnings:
        log.warning("%s", warning)
    save_tokenizer(tokenizer, run_dir / "tokenizer.json", max_len=max_len, truncation=truncation)

    cfg = {"vocab_size": tokenizer.get_vocab_size(), "num_classes": len(ds.labels), **model_overrides}
    cfg["max_len"] = max_len
    seed_everything(train_cfg.seed)  # the initial weights are part of what a seed reproduces
    model = build_model(family, cfg)
    # Encoded and checked, the training texts are never read again: free them before training.
    ds, train_texts = dataclasses.replace(ds, train=[]), []
    release_unused_memory()
    cpu_start = time.process_time()  # wall time alone misleads on a shared machine
    history = fit(
        model,
        splits["train"],
        splits["val"],
        train_cfg,
        unk_id=UNK_ID,
        keep_first_token=add_cls,
        state_path=run_dir / RESUME,
    )
    cpu_seconds = time.process_time() - cpu_start
    device = pick_device(train_cfg.device)
    evaluation: Evaluation = evaluate_splits(
        model, {k: s for k, s in splits.items() if k != "train"}, ds.labels, ds.ordered, device
    )
    for warning in evaluation.warnings:
        log.warning("%s", warning)
    metrics: dict[str, Any] = {
        "task": ds.name,
        "family": family,
        "labels": list(ds.labels),
        "ordered_labels": ds.ordered,
        "params": sum(p.numel() for p in model.parameters()),
        "tokenizer": data_spec.tokenizer,
        "train_seconds": round(history.seconds, 2),
        "train_cpu_seconds": round(cpu_seconds, 2),
        "best_epoch": history.best_epoch,
        "epochs_run": len(history.epochs),
        "out_of_time": history.out_of_time,
        "select_by": train_cfg.select_by,
        "class_weights": train_cfg.class_weights,
        **evaluation.scores,
        "data": report.figures,
        "warnings": report.warnings + evaluation.warnings,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],  # how shared the machine was
        "history": history.epochs,
    }
    write_run(run_dir, model, tokenizer, ds, metrics, evaluation, history, truncation)
    if not history.out_of_time:  # complete: nothing left to resume
        (run_dir / RESUME).unlink(missing_ok=True)
    return RunResult(run_dir, metrics, history)
