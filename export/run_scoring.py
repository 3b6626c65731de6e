"""What a training run's scores mean in its bundle: a multi-label run's thresholds and gate.

A run trained with ``--multi-label`` (training/data/multi_label.py) has a sigmoid per label,
so its bundle declares ``Scoring.multi_label`` with one threshold per label, chosen to maximise
that label's F1 on the run's validation split (``eval.jsonl``, which also chose the
checkpoint; the test split stays unseen for the int8 gate, which then compares micro-F1 at
those thresholds: ``quantize.MicroF1``). The choice is thresholds.py's, made on the PyTorch
model's logits through the tokenizer file the bundle ships, cut on the served side, exactly as
an imported model's thresholds are chosen on ``--rows`` (problem_rows.py).

No temperature is fitted and no data profile measured for such a run: temperature scaling
calibrates one softmax over the labels, and the profile records a softmax's confidences and
one label's share per text. A single-label run's held-out rows pass through unchanged.
"""

from __future__ import annotations

import dataclasses
import logging

from attnserve.export.errors import ExportError
from attnserve.export.held_out import HeldOut
from attnserve.export.pipeline import run_truncation
from attnserve.export.problem_rows import CHOSEN_BY_F1, model_logits
from attnserve.export.quantize import MicroF1
from attnserve.export.thresholds import choose_thresholds, label_f1
from attnserve.service.bundle import DEFAULT_THRESHOLD, Scoring, Thresholds
from attnserve.training.run.checkpoint import LoadedRun

log = logging.getLogger(__name__)
SOFTMAX_ONLY = (
    "no temperature fitted and no data profile measured: both describe a softmax over the labels, "
    "and {run} is multi-label (a sigmoid per label, served at the thresholds chosen on {rows})"
)


def scored_held_out(run: LoadedRun, held_out: HeldOut) -> HeldOut:
    """``held_out`` with a multi-label run's scoring and gate metric, and without the rows of
    the softmax-only steps; unchanged for a single-label run."""
    if not run.multi_label:
        return held_out
    scoring = run_scoring(run, held_out)
    rows = scoring.chosen.file if scoring.chosen is not None and scoring.chosen.file else "none (0.5)"
    log.warning(SOFTMAX_ONLY.format(run=run.run_dir, rows=rows))
    return dataclasses.replace(
        held_out, validation=None, profile=None, scoring=scoring, metric=MicroF1(scoring)
    )


def run_scoring(run: LoadedRun, held_out: HeldOut) -> Scoring:
    """A multi-label run's scoring: thresholds chosen on its validation split (0.5 each
    without one)."""
    labels = len(run.labels)
    if held_out.validation is None:
        log.info("thresholds: %g per label (the run has no validation split to choose them on)",
                 DEFAULT_THRESHOLD)  # fmt: skip
        return Scoring.multi_label(labels)
    rows, named = held_out.validation
    if not rows.multi_label:
        raise ExportError(
            f"{run.run_dir} is a multi-label run but {named.file} holds one label per row; re-run "
            "training to write it"
        )
    served = Scoring.multi_label(labels)
    logits = model_logits(run.model, run.tokenizer_path, rows.texts, run.max_len, run_truncation(run))
    probabilities = served.probabilities(logits)
    targets = rows.labels.astype(bool)
    thresholds = choose_thresholds(probabilities, targets)
    for c, (name, threshold) in enumerate(zip(run.labels, thresholds, strict=True)):
        log.info(
            "threshold of %s: %.4g (F1 on %s %.4f; at 0.5 %.4f)", name, threshold, named.file,
            label_f1(probabilities[:, c], targets[:, c], threshold),
            label_f1(probabilities[:, c], targets[:, c], DEFAULT_THRESHOLD),
        )  # fmt: skip
    chosen = Thresholds(method=CHOSEN_BY_F1, file=named.file, rows=len(rows), sha256=named.sha256)
    return Scoring.multi_label(labels, thresholds, chosen)
