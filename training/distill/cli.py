"""`attnserve-train distill`: train a student of any family on a teacher's logits.

Every flag of `attnserve-train` applies to the student (--data, --model, its width, the
trainer's); these add the teacher and how the student learns from it:

    attnserve-train distill --teacher runs/bert --data train.csv --val-data dev.csv --out runs/student

The teacher is any run directory (any family, an encoder fine-tuned with --pretrained
included), a Hugging Face sequence-classifier folder (what save_pretrained writes; scored by
transformers, texts cut at its limit or --teacher-max-len), or a bundle version (one imported
from such a folder is scored by that folder where it is still at hand, else by its graph),
with the same labels by name. Without --labels the student takes the teacher's class order,
so the two can be published as a cascade (attnserve-export cascade). The teacher scores the
training texts and --augment copies of each (masked words, swapped words, n-grams: the copies
have no gold label and learn from the teacher alone) once; its logits are cached in
OUT/teacher/ and reused while the teacher and the texts stay the same. --max-seconds budgets
the student's training: the teacher's pass is not counted (metrics.json records its
seconds). The student exports and serves as any run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnserve.training.cli.exits import UsageError
from attnserve.training.distill.augment import AugmentConfig
from attnserve.training.distill.loss import DISTILL_LOSSES, DistillLoss
from attnserve.training.distill.sources import teacher_kind
from attnserve.training.distill.student import DistillSpec
from attnserve.training.distill.teacher import TeacherError

DEFAULT_AUGMENT = 2
# Soft targets over augmented texts do not overfit as gold labels do: on SST-2 the student's
# validation loss still fell after 4 epochs, where the gold-only run peaked after one. So a
# student's --data plan takes 3x the steps (SST-2: 9,000; docs/results/distillation.md).
STUDENT_STEPS_FACTOR = 3.0


def add_distill_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("distillation")
    g.add_argument(
        "--teacher",
        required=True,
        metavar="FOLDER",
        help="the teacher: a run directory, a Hugging Face sequence-classifier folder, or a bundle version",
    )
    g.add_argument(
        "--teacher-max-len",
        type=int,
        default=None,
        metavar="N",
        help="a Hugging Face folder's (or imported bundle's) teacher: tokens its texts are cut to "
        "(default: the model's and tokenizer's limit; an imported bundle's max_len)",
    )
    g.add_argument(
        "--distill-loss",
        default="mse",
        choices=DISTILL_LOSSES,
        help="mse: regress the teacher's logits (Tang et al. 2019); kl: temperature-scaled KL "
        "divergence to its probabilities (Hinton et al. 2015) (default: mse)",
    )
    g.add_argument(
        "--temperature", type=float, default=2.0, help="softens both distributions, kl only (default: 2)"
    )
    g.add_argument(
        "--alpha",
        type=float,
        default=0.5,
        help="weight of the teacher's loss on rows with a gold label, the rest on the gold "
        "label's cross-entropy (1: the teacher alone; default: 0.5)",
    )
    g.add_argument(
        "--augment",
        type=int,
        default=DEFAULT_AUGMENT,
        metavar="N",
        help=f"augmented copies of each training text for the teacher to label (default: {DEFAULT_AUGMENT})",
    )


def distill_spec(ns: argparse.Namespace) -> DistillSpec:
    """The flags as a DistillSpec, checked before any data is read."""
    try:
        kind = teacher_kind(Path(ns.teacher))
    except TeacherError as exc:
        raise UsageError(str(exc)) from None
    if ns.teacher_max_len is not None and (kind == "run" or ns.teacher_max_len < 1):
        why = "a run reads the max_len it trained with" if kind == "run" else "it must be >= 1"
        raise UsageError(f"--teacher-max-len {ns.teacher_max_len}: {why}")
    try:
        loss = DistillLoss(ns.distill_loss, ns.temperature, ns.alpha)
        augment = AugmentConfig(copies=ns.augment, seed=ns.seed if ns.seed is not None else 0)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return DistillSpec(ns.teacher, loss, augment, ns.teacher_max_len)
