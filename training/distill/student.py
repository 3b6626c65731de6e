"""The student's training split: the training texts and their augmented copies, with the teacher's logits.

Rows with a gold label keep it; augmented rows carry NO_LABEL and learn from the teacher
alone. The teacher scores the validation texts in the same pass, so the run records how well
the teacher does on the split the student is judged on.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from attnserve.training.data.core import Dataset, Example
from attnserve.training.data.encoding import EncodedTexts, encode_texts
from attnserve.training.distill.augment import AugmentConfig, augment_texts
from attnserve.training.distill.loss import NO_LABEL, DistillLoss
from attnserve.training.distill.sources import declared_labels, open_teacher
from attnserve.training.distill.teacher import cached_logits
from attnserve.training.loop.batching import Split

log = logging.getLogger(__name__)
EncodeTexts = Callable[[Tokenizer, Sequence[str], int, str], EncodedTexts]


@dataclass(frozen=True)
class DistillSpec:
    """What ``attnserve-train distill`` adds to a run: the teacher, the loss, the augmentation."""

    teacher: str  # a run directory, a Hugging Face classifier folder or a bundle folder (sources.py)
    loss: DistillLoss = field(default_factory=DistillLoss)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    teacher_max_len: int | None = None  # a folder or bundle teacher's: tokens its texts are cut to


@dataclass(frozen=True)
class StudentData:
    train: Split  # the training rows, then the augmented ones; soft [N, C] set
    record: dict[str, Any]  # the teacher, for metrics.json (and so bundle.json)


def student_data(
    spec: DistillSpec,
    train: Split,
    train_examples: list[Example],
    val_examples: list[Example],
    labels: tuple[str, ...],
    tokenizer: Tokenizer,
    max_len: int,
    truncation: str,
    run_dir: Path,
    device: torch.device,
    max_tokens: int = 2048,
    encode: EncodeTexts = encode_texts,
) -> StudentData:
    """The student's training split and the teacher's record; ``encode`` encodes the augmented
    texts as the training texts were (the student family's ``encode_texts``)."""
    teacher = open_teacher(spec.teacher, spec.teacher_max_len)
    texts = [e.text for e in train_examples]
    aug = augment_texts(texts, spec.augment, teacher.mask_token)
    val_texts = [e.text for e in val_examples]
    got = cached_logits(teacher, texts + aug.teacher + val_texts, labels, run_dir, device, max_tokens)
    n, m = len(texts), len(aug.student)
    enc = encode(tokenizer, aug.student, max_len, truncation)
    groups = None
    if train.groups is not None:  # augmented rows in groups of their own
        start = int(train.groups.max()) + 1 if n else 0
        groups = np.concatenate([train.groups, np.arange(start, start + m, dtype=train.groups.dtype)])
    combined = Split(  # both id matrices are max_len wide
        input_ids=np.concatenate([train.input_ids, enc.input_ids.astype(train.input_ids.dtype)]),
        lengths=np.concatenate([train.lengths, enc.lengths.astype(train.lengths.dtype)]),
        labels=np.concatenate([train.labels, np.full(m, NO_LABEL, dtype=train.labels.dtype)]),
        groups=groups,
        soft=got.logits[: n + m],
    )
    val_logits = got.logits[n + m :]
    val_labels = np.array([e.label for e in val_examples], dtype=np.int64)
    agreement = float((got.logits[:n].argmax(-1) == train.labels).mean()) if n else 0.0
    record: dict[str, Any] = {
        "path": str(Path(spec.teacher).resolve()),
        "checksum": teacher.checksum,
        **teacher.record(),
        "val_accuracy": float((val_logits.argmax(-1) == val_labels).mean()) if len(val_labels) else None,
        "train_accuracy": agreement,
        **spec.loss.record(),
        "augment": spec.augment.copies,
        "augmented_rows": m,
        "logits_cached": got.cached,
        "logits_seconds": round(got.seconds, 2),
    }
    log.info(
        "teacher %s (%s): validation accuracy %s; %d training and %d augmented texts",
        spec.teacher, record["family"], record["val_accuracy"], n, m,
    )  # fmt: skip
    return StudentData(combined, record)


def in_teacher_order(ds: Dataset, spec: DistillSpec) -> Dataset:
    """``ds`` with its classes in the teacher's order, where the teacher has the same class names
    in another order (a cascade of the two needs one order); else ``ds`` as it is. Ordered
    (ordinal) and multi-label data keep theirs; --labels, which fixes an order, skips this."""
    teacher = declared_labels(spec.teacher)
    if ds.ordered or ds.multi_label or teacher is None or list(ds.labels) == teacher:
        return ds
    if sorted(teacher) != sorted(ds.labels):
        return ds  # cached_logits refuses it, naming both sets
    new = {old: teacher.index(name) for old, name in enumerate(ds.labels)}

    def moved(examples: list[Example]) -> list[Example]:
        return [dataclasses.replace(e, label=new[e.label]) for e in examples]

    log.info("classes in the teacher's order: %s (the data's was %s)", teacher, list(ds.labels))
    extra = {name: moved(rows) for name, rows in ds.extra.items()}
    return dataclasses.replace(
        ds, labels=tuple(teacher), train=moved(ds.train), val=moved(ds.val), test=moved(ds.test), extra=extra
    )
