"""Scoring a split, and what a validation records: its history row, the best weights so far."""

from __future__ import annotations

import copy
import logging

import numpy as np
import torch
import torch.nn.functional as F

from attnserve.training.loop.batching import Split, batch_tensors, scoring_batches
from attnserve.training.loop.config import TrainConfig, selection_key
from attnserve.training.loop.progress import on_terminal
from attnserve.training.loop.resume import LoopState
from attnserve.training.loop.step import bce_rows
from attnserve.training.models.base import Classifier
from attnserve.training.report.metrics import Scores, score
from attnserve.training.report.multi_label import MultiScores, multi_score

# The loop's lines go out under one name, whichever of its modules writes them.
log = logging.getLogger("attnserve.training.loop.trainer")


@torch.no_grad()
def predict(
    model: Classifier, split: Split, device: torch.device, batch_size: int = 64, max_tokens: int = 0
) -> tuple[np.ndarray, float]:
    """Probabilities [N, C] (in the split's row order) and mean cross-entropy over a split; for
    a multi-label split a sigmoid per label and the mean binary cross-entropy.

    Batches of training size: at 130 tokens on one thread batch 64 scored 490-540 texts per
    CPU second and batch 256 only 350-380, with four times the activations. ``max_tokens``
    caps a batch's padded tokens as well (0: no cap), as in training.
    """
    model.eval()
    probs = np.zeros((len(split), model.config.num_classes), dtype=np.float32)
    total = 0.0
    for idx in scoring_batches(split, batch_size, max_tokens):
        ids, mask, labels = batch_tensors(split, idx, device)
        logits = model.logits(ids, mask)
        if split.multi_label:
            total += float(bce_rows(logits.float(), labels).sum())
            probs[idx] = torch.sigmoid(logits.float()).cpu().numpy()
            continue
        total += float(F.cross_entropy(logits, labels, reduction="sum"))
        probs[idx] = torch.softmax(logits.float(), dim=-1).cpu().numpy()
    return probs, total / max(len(split), 1)


def evaluate(
    model: Classifier, split: Split, device: torch.device, max_tokens: int = 0
) -> Scores | MultiScores:
    probs, loss = predict(model, split, device, max_tokens=max_tokens)
    if split.multi_label:
        return multi_score(split.labels, probs, loss)
    return score(split.labels, probs, loss)


def record_validation(
    loop: LoopState,
    figures: tuple[float, float, float],
    model: Classifier,
    val: Split,
    device: torch.device,
    cfg: TrainConfig,
    epochs: int,
    *,
    step: int,
    lr: float,
    seconds: float,
    threads: int | None,
) -> None:
    """Validate, record a history row, keep the best weights; count validations without gain.

    ``figures``: the epoch's running loss, right and seen rows so far, over every rank.
    """
    val_scores = evaluate(model, val, device, cfg.max_batch_tokens)
    # Train figures are running ones (during the epoch, with dropout and augmentation on):
    # a second pass over the training set would cost a third of the epoch again.
    running_loss, correct, seen = figures
    multi = isinstance(val_scores, MultiScores)  # a row is right when every label is (exact match)
    row = {
        "epoch": loop.epoch,
        "step": step,  # steps so far, over the whole run
        "train_loss": running_loss / max(seen, 1),
        "train_exact_match" if multi else "train_accuracy": correct / max(seen, 1),
        "lr": lr,
        "seconds": seconds,
        "threads": threads,  # torch's CPU count at this point (None off the CPU)
        **{f"val_{k}": v for k, v in val_scores.as_dict().items() if k != "n"},
    }
    loop.epochs.append(row)
    # One line a validation where no bar is drawn (a log file, a pipe, CI): never silent.
    level = logging.DEBUG if cfg.progress and on_terminal() else logging.INFO
    if isinstance(val_scores, MultiScores):
        figure = ("micro-F1", val_scores.micro_f1)
    else:
        figure = ("accuracy", val_scores.accuracy)
    log.log(level, "epoch %d/%d  step %d  train loss %.4f  val %s %.4f  val loss %.4f  %.0f s",
            loop.epoch, epochs, row["step"], row["train_loss"], *figure, val_scores.loss,
            seconds)  # fmt: skip
    key = selection_key(cfg, val_scores)
    if key > loop.best_key:
        loop.best_key, loop.since_best, loop.best_epoch = key, 0, loop.epoch
        loop.best_state = copy.deepcopy(model.state_dict())
    else:
        loop.since_best += 1
