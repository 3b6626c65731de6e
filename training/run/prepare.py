"""A run's data made ready to train on: loaded, tokenized, checked, encoded, written out.

Rank 0 alone writes the tokenizer and the evaluation sets; every rank encodes the same rows.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from attnserve.training import data as datasets
from attnserve.training.data.encoding import EncodedTexts, encode_texts
from attnserve.training.data.multi_label import label_matrix
from attnserve.training.data.spec import DataSpec, load_dataset
from attnserve.training.distill.student import DistillSpec, in_teacher_order, student_data
from attnserve.training.loop import distributed
from attnserve.training.loop.config import MULTI_LABEL_SELECT_BY
from attnserve.training.loop.trainer import Split, TrainConfig, pick_device
from attnserve.training.models import FAMILIES
from attnserve.training.models.families import Family
from attnserve.training.report.data import DataReport, auto_max_len, check_classes, check_lengths
from attnserve.training.report.multi_label import check_label_counts
from attnserve.training.run.checkpoint import TEST_SET
from attnserve.training.run.outputs import attention_examples, write_eval_set
from attnserve.training.run.start import Start
from attnserve.training.text.tokenizer import token_lengths

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    """The run's data once encoded: texts dropped, the tokenizer kept until the model is built."""

    ds: datasets.Dataset  # names, labels and order; its texts are gone
    splits: dict[str, Split]
    max_len: int
    truncation: str
    report: DataReport
    samples: list[datasets.Example]  # the texts of the attention picture
    tokenizer: Tokenizer | None
    teacher: dict[str, Any] | None = None  # the teacher's record when distilling


def resolve_max_len(
    spec: DataSpec,
    family: str,
    overrides: dict[str, Any],
    lengths: dict[str, np.ndarray],
    positions: int | None = None,
) -> tuple[int, str]:
    """max_len and where it came from: set, auto, a task's or the family's default.

    auto takes a percentile of the training lengths, raised to the longest text of the splits
    the run is judged on (val, test): training on SST-2's short phrases, p95 alone (24 tokens)
    cut a fifth of its test sentences. Batches are padded to their own longest text, so a
    longer max_len costs only where texts are long. ``positions`` (a pretrained encoder's
    position table) caps the result.
    """
    if positions is not None:
        capped = dataclasses.replace(spec, max_len_cap=min(spec.max_len_cap, positions))
        value, how = resolve_max_len(capped, family, overrides, lengths)
        if value > positions:
            raise datasets.DataError(
                f"--max-len {value} exceeds the {positions} positions of the pretrained encoder"
            )
        return value, f"{how} (the encoder has {positions} positions)"
    requested = spec.max_len if spec.max_len is not None else overrides.get("max_len")
    if requested is None and spec.path is not None:
        requested = "auto"
    if requested == "auto":
        value = auto_max_len(lengths["train"], spec.max_len_percentile, spec.max_len_cap)
        judged = [int(v.max()) for k, v in lengths.items() if k != "train" and v.size]
        covering = min(max([value, *judged]), spec.max_len_cap)
        how = f"auto: p{spec.max_len_percentile:g} of training lengths"
        if covering > value:
            how += ", raised to cover the evaluated splits"
        return covering, f"{how}, cap {spec.max_len_cap}"
    if requested is not None:
        return int(requested), "set"
    task_default = datasets.DEFAULTS[spec.task].max_len if spec.task in datasets.DEFAULTS else None
    if task_default is not None:
        return task_default, f"{spec.task} default"
    defaults: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(FAMILIES[family].config_cls)}
    return int(defaults["max_len"]), "model default"


def encode(
    tok: Tokenizer,
    examples: list[datasets.Example],
    max_len: int,
    truncation: str,
    encode_texts: Callable[[Tokenizer, list[str], int, str], EncodedTexts] = encode_texts,
    multi_labels: int = 0,
) -> Split:
    """One split as an [N, max_len] int32 id matrix and lengths, encoded a chunk at a time;
    with ``multi_labels`` (the label count of multi-label data) its labels are [N, C] 0/1."""
    enc = encode_texts(tok, [e.text for e in examples], max_len, truncation)
    if multi_labels:
        labels = label_matrix(examples, multi_labels)
    else:
        labels = np.fromiter((e.label for e in examples), dtype=np.int64, count=len(examples))
    groups = np.fromiter((e.group for e in examples), dtype=np.int64, count=len(examples))
    return Split(enc.input_ids, enc.lengths, labels, groups)


def check_multi_label(spec: DataSpec, cfg: TrainConfig, distill: DistillSpec | None) -> None:
    """Refuse, before any data is read, the settings that mean one label per text."""
    if not spec.multi_label:
        return
    if distill is not None:
        raise datasets.DataError(
            "attnserve-train distill learns a teacher's softmax over one label per text; it does not "
            "distill multi-label data (--multi-label) yet"
        )
    if cfg.class_weights != "none":
        raise datasets.DataError(
            f"--class-weights {cfg.class_weights} weighs classes of one label per text; with "
            "--multi-label each label is its own yes/no: drop --class-weights"
        )
    if cfg.select_by not in MULTI_LABEL_SELECT_BY:
        raise datasets.DataError(
            f"--select-by {cfg.select_by} has no multi-label meaning; use one of "
            f"{', '.join(MULTI_LABEL_SELECT_BY)} (micro_f1 is --multi-label's default)"
        )


def prepare(
    run_dir: Path,
    start: Start,
    family: Family,
    overrides: dict[str, Any],
    spec: DataSpec,
    train_cfg: TrainConfig,
    distill: DistillSpec | None,
    at: distributed.Ranks,
) -> Prepared:
    """Load the data, tokenize and check it, write the tokenizer and the evaluation sets.
    ``overrides``: the model flags given (a max_len among them)."""
    check_multi_label(spec, train_cfg, distill)
    ds = load_dataset(spec)
    if distill is not None and spec.labels is None:  # the teacher's class order, for a cascade of the two
        ds = in_teacher_order(ds, distill)
    train_texts = [e.text for e in ds.train]
    tokenizer = start.tokenizer(train_texts)
    evaluated = {k: v for k, v in {"val": ds.val, "test": ds.test, **ds.extra}.items() if v}
    lengths = {"train": token_lengths(tokenizer, train_texts)}
    lengths |= {k: token_lengths(tokenizer, [e.text for e in v]) for k, v in evaluated.items()}
    max_len, how = resolve_max_len(spec, family.name, overrides, lengths, start.max_positions)
    truncation = spec.truncation
    report = DataReport()
    check_lengths(report, lengths, max_len, truncation, how)
    tagged = len(ds.labels) if ds.multi_label else 0
    splits = {k: encode(tokenizer, v, max_len, truncation, family.encode_texts, tagged)
              for k, v in {"train": ds.train, **evaluated}.items()}  # fmt: skip
    encoded = {k: (s.input_ids, s.lengths) for k, s in splits.items() if k in ("train", "val")}
    start.check(report, tokenizer, train_texts, encoded)
    if ds.multi_label:
        check_label_counts(report, ds.labels, [e.tags for e in ds.train])
    else:
        check_classes(report, ds.labels, [e.label for e in ds.train], train_cfg.class_weights != "none")
    log.info("%s: %s", ds.name, ", ".join(f"{len(s):,} {k}" for k, s in splits.items()))
    for line in report.notes:
        log.info("%s", line)
    for warning in report.warnings:
        log.warning("%s", warning)
    if at.main:
        start.save(tokenizer, run_dir / "tokenizer.json", max_len, truncation)
        write_eval_set(run_dir, ds.val)
        write_eval_set(run_dir, ds.test, TEST_SET)  # export gates int8 on it: its labels chose nothing
    teacher = None
    if distill is not None:  # the teacher labels the training texts and their augmented copies
        got = student_data(distill, splits["train"], ds.train, ds.val, ds.labels, tokenizer, max_len,
                           truncation, run_dir, pick_device(train_cfg.device), train_cfg.max_batch_tokens,
                           family.encode_texts)  # fmt: skip
        splits["train"], teacher = got.train, got.record
    samples = attention_examples(ds)
    # Encoded, checked and written out, no text is read again: the texts go before training.
    # What outlives them keeps their heap pages resident, so the evaluation texts go too (they
    # lie among the training ones), and the tokenizer, whose vocabulary was learnt among them,
    # goes once the model is built and is reloaded from its file: at 120,000 long texts the
    # two kept 60 and 50 MB of freed memory resident through training.
    ds = dataclasses.replace(ds, train=[], val=[], test=[], extra={})
    return Prepared(ds, splits, max_len, truncation, report, samples, tokenizer, teacher)
