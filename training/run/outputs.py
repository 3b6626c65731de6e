"""What a finished run leaves behind: scores and class reports per split, files and pictures.

    checkpoint.pt  tokenizer.json  metrics.json  report.json  eval.jsonl  test.jsonl
    curves.png  attention.png  confusion.png

``report.json`` holds, per evaluated split, precision/recall/F1/support per class, the
confusion matrix (rows = true class) and, for ordered labels, the mean absolute error; for
multi-label data, per label at threshold 0.5 (no confusion matrix: a text has several labels).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from attnserve.training.data import Dataset, Example
from attnserve.training.data.core import TAGGED
from attnserve.training.data.multi_label import tag_names
from attnserve.training.loop.trainer import History, Split, predict
from attnserve.training.models.base import Classifier
from attnserve.training.report.metrics import class_report, score
from attnserve.training.report.model_checks import prediction_warnings
from attnserve.training.report.multi_label import DEFAULT_THRESHOLD, label_report, label_warnings, multi_score
from attnserve.training.report.plots import plot_attention, plot_confusion, plot_curves
from attnserve.training.run.checkpoint import EVAL_SET, METRICS, save_checkpoint, write_json
from attnserve.training.text.tokenizer import encode_batch

REPORT = "report.json"
CONFUSION_PNG = "confusion.png"


@dataclass
class Evaluation:
    scores: dict[str, dict[str, float]] = field(default_factory=dict)  # split -> scores (+ mae)
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)  # split -> class report
    warnings: list[str] = field(default_factory=list)


def evaluate_splits(
    model: Classifier,
    splits: dict[str, Split],
    labels: tuple[str, ...],
    ordered: bool,
    device: torch.device,
    max_tokens: int = 0,
    history: Sequence[dict[str, Any]] = (),
) -> Evaluation:
    """Scores, class reports and prediction warnings for every split (validation first).

    ``max_tokens`` caps the padded tokens of one scoring batch (0: no cap).
    """
    out = Evaluation()
    for name, split in splits.items():
        probs, loss = predict(model, split, device, max_tokens=max_tokens)
        if split.multi_label:
            out.scores[name] = multi_score(split.labels, probs, loss).as_dict()
            out.reports[name] = label_report(split.labels, probs, labels)
            if name in ("val", "test"):
                out.warnings += label_warnings(name, out.reports[name])
            continue
        scores = score(split.labels, probs, loss).as_dict()
        report = class_report(split.labels, probs, labels, ordered=ordered)
        if "mae" in report:
            scores["mae"] = report["mae"]
        out.scores[name], out.reports[name] = scores, report
        if name in ("val", "test"):
            out.warnings += prediction_warnings(name, report, scores, history)
    return out


def _attention_samples(
    model: Classifier, tokenizer: Tokenizer, examples: list[Example], labels: tuple[str, ...], truncation: str
) -> list[tuple[str, list[str], np.ndarray]]:
    if model.attention_kind == "none":
        return []
    max_len = int(model.config.max_len)
    samples = []
    for ex in examples:
        enc = encode_batch(tokenizer, [ex.text], max_len, truncation)
        with torch.no_grad():
            logits, att = model(torch.from_numpy(enc.input_ids), torch.from_numpy(enc.attention_mask))
        if ex.label == TAGGED:  # multi-label: every label at 0.5 and over
            given = torch.sigmoid(logits[0]) >= DEFAULT_THRESHOLD
            true, pred = tag_names(ex.tags, labels), tag_names(given.nonzero().flatten().tolist(), labels)
        else:
            true, pred = labels[ex.label], labels[int(logits.argmax(-1))]
        assert att is not None
        samples.append((f"true {true}\npred {pred}", enc.tokens[0], att[0].cpu().numpy()))
    return samples


def write_eval_set(run_dir: Path, examples: list[Example], name: str = EVAL_SET) -> None:
    """``eval.jsonl``: the validation texts and labels, written before training so they can be freed.

    ``name``: another split's file (``test.jsonl``, empty when the run has no test split). A
    multi-label row is ``{"text", "labels": [ids]}``: the ids of every label it has.
    """
    with open(run_dir / name, "w") as fh:
        for ex in examples:
            row: dict[str, object] = {"labels": list(ex.tags)} if ex.label == TAGGED else {"label": ex.label}
            fh.write(json.dumps({"text": ex.text, **row}) + "\n")


def attention_examples(ds: Dataset) -> list[Example]:
    """The texts of the attention picture: short ones read best, so the 3 shortest of 50 test texts."""
    return sorted(ds.test[:50] or ds.val[:50], key=lambda e: len(e.text))[:3]


def write_run(
    run_dir: Path,
    model: Classifier,
    tokenizer: Tokenizer,
    ds: Dataset,
    metrics: dict[str, Any],
    evaluation: Evaluation,
    history: History,
    truncation: str,
    samples: list[Example],
) -> None:
    """Checkpoint, metrics, class reports and pictures; ``samples`` go in the attention picture."""
    model.cpu()
    summary = {k: v for k, v in metrics.items() if k != "history"}  # the history stays in metrics.json
    save_checkpoint(run_dir, model, labels=list(ds.labels), task=ds.name, metrics=summary,
                    truncation=truncation, multi_label=ds.multi_label)  # fmt: skip
    write_json(run_dir / METRICS, metrics)
    write_json(run_dir / REPORT, evaluation.reports)
    title = f"{metrics['family']} on {ds.name}"
    plot_curves(history.epochs, run_dir / "curves.png", title)
    shown = {k: v for k, v in evaluation.reports.items() if k != "val"} or evaluation.reports
    plot_confusion(shown, run_dir / CONFUSION_PNG, title)
    plot_attention(
        _attention_samples(model, tokenizer, samples, ds.labels, truncation), run_dir / "attention.png", title
    )
