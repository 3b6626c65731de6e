"""The training loop over whole texts: each step is texts packed by a token budget, each
text's loss the cross-entropy of the mean of its windows' logits.

A step's texts are packed whole up to `budget` padded window tokens and run as passes of at
most `max_batch_tokens` (whole texts again; a text over it goes alone, so memory is bounded
by the larger of that and max_windows x window, never by the data's longest text). Each pass
adds its texts' summed loss divided by the step's texts, so the gradient is the step's mean
loss. The optimizer and schedule are the trainer's (AdamW, warmup, cosine or linear decay).
"""

from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from attnserve.service.bundle import LongTexts
from attnserve.training.data import word_dropout
from attnserve.training.long_texts.fold import readings
from attnserve.training.long_texts.windows import Documents, pack, window_rows
from attnserve.training.loop.config import DEFAULT_EPOCHS, TrainConfig, class_weight_tensor, selection_key
from attnserve.training.loop.progress import EpochProgress
from attnserve.training.loop.schedule import PLAN_AFTER_STEPS, WARM_STEPS, LearningRate, budget_steps
from attnserve.training.loop.trainer import make_optimizer, seed_everything
from attnserve.training.models.base import Classifier

log = logging.getLogger(__name__)


@dataclass
class LongHistory:
    epochs: list[dict[str, Any]] = field(default_factory=list)
    best_epoch: int = 0
    steps: int = 0
    seconds: float = 0.0
    out_of_time: bool = False


@dataclass(frozen=True)
class Windows:
    """What the loop needs besides the texts: the policy, the step budget, word dropout's ids."""

    policy: LongTexts
    budget: int  # padded window tokens of one step
    unk_id: int
    keep_ids: frozenset[int]  # the tokenizer's special tokens: never dropped


def planned_epochs(cfg: TrainConfig, steps_per_epoch: int) -> int:
    """As the trainer plans them, counting packed steps: --epochs, else 25 (or the epochs of
    --target-steps), raised to reach --min-steps."""
    if cfg.epochs > 0:
        return cfg.epochs
    base = math.ceil(cfg.target_steps / steps_per_epoch) if cfg.target_steps else DEFAULT_EPOCHS
    return max(base, math.ceil(cfg.min_steps / steps_per_epoch), 1)


def fit_long(
    model: Classifier, train: Documents, val: Documents, cfg: TrainConfig, at: Windows, device: torch.device
) -> LongHistory:
    """Train in place and keep the weights of the best validation (mean of the windows)."""
    seed_everything(cfg.seed)
    if device.type == "cpu" and cfg.threads:
        torch.set_num_threads(cfg.threads)
    model.to(device)
    rng = np.random.default_rng(cfg.seed)
    per_epoch = len(pack(train, np.arange(len(train)), at.budget))
    epochs = planned_epochs(cfg, per_epoch)
    opt, sched = make_optimizer(model, cfg, steps=epochs * per_epoch)
    rate = sched.lr_lambdas[0]
    assert isinstance(rate, LearningRate)
    weights = class_weight_tensor(cfg, train.labels, int(model.config.num_classes))
    weights = None if weights is None else weights.to(device)
    bar = EpochProgress(cfg.progress, epochs, log_every=cfg.log_every)
    history, best_key, best_state, since_best = LongHistory(), None, None, 0
    started = time.perf_counter()
    log.info(
        "%d texts (%d windows) in about %d steps an epoch of at most %d window tokens, %d epochs",
        len(train),
        len(train.lengths),
        per_epoch,
        at.budget,
        epochs,
    )

    def validate(epoch: int, loss: float) -> bool:
        """Record a validation; True when patience has run out."""
        nonlocal best_key, best_state, since_best
        figures, _ = readings(model, val, at.policy, device, cfg.max_batch_tokens or at.budget)
        mean = figures["mean"]
        row = {
            "epoch": epoch,
            "step": history.steps,
            "train_loss": loss,
            "val_loss": mean.loss,
            "val_accuracy": mean.accuracy,
            "val_macro_f1": mean.macro_f1,
            **{f"val_{name}": s.accuracy for name, s in figures.items()},
            "lr": float(sched.get_last_lr()[0]),
            "seconds": round(time.perf_counter() - started, 2),
        }
        history.epochs.append(row)
        key = selection_key(cfg, mean)
        if best_key is None or key > best_key:
            best_key, best_state, since_best = key, copy.deepcopy(model.state_dict()), 0
            history.best_epoch = epoch
        else:
            since_best += 1
        log.info(
            "epoch %d/%d  step %d  train loss %.4f  val loss %.4f  val accuracy truncate %.4f  mean "
            "%.4f  max %.4f",
            epoch,
            epochs,
            history.steps,
            loss,
            mean.loss,
            figures["truncate"].accuracy,
            mean.accuracy,
            figures["max"].accuracy,
        )
        model.train()
        return since_best >= cfg.patience

    stop, warm = False, started
    for epoch in range(1, epochs + 1):
        steps = pack(train, rng.permutation(len(train)), at.budget)
        bar.start(epoch, len(train), len(steps))
        model.train()
        total, seen = 0.0, 0
        for texts in steps:
            if cfg.max_seconds and history.steps and time.perf_counter() - started > cfg.max_seconds:
                history.out_of_time = stop = True
                break
            loss = _step(model, opt, train, texts, cfg, at, weights, rng, device)
            sched.step()
            history.steps += 1
            warm = _plan_to_budget(cfg, sched, history.steps, started, warm)
            total, seen = total + loss * len(texts), seen + len(texts)
            bar.update(len(texts), loss)
            if cfg.eval_every and history.steps % cfg.eval_every == 0 and validate(epoch, total / seen):
                stop = True
                break
            if history.steps >= rate.total < rate.planned:  # the budget's plan is done: so is the run
                stop = True
                break
        bar.close()
        looked = bool(history.epochs) and history.epochs[-1]["step"] == history.steps
        # Out of time, the steps since the last validation may still hold the best weights.
        if seen and not looked and validate(epoch, total / seen):
            stop = True
        if stop:
            break
    bar.close()
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    history.seconds = time.perf_counter() - started
    return history


def _plan_to_budget(
    cfg: TrainConfig, sched: torch.optim.lr_scheduler.LambdaLR, steps: int, started: float, warm: float
) -> float:
    """With --plan-to-budget and --max-seconds, end the learning-rate decay with the budget, at
    the pace of the steps after the first (as the trainer does); the time the timing starts."""
    if not (cfg.plan_to_budget and cfg.max_seconds):
        return warm
    now = time.perf_counter()
    if steps == WARM_STEPS:
        return now
    if steps == PLAN_AFTER_STEPS:
        rate = sched.lr_lambdas[0]
        assert isinstance(rate, LearningRate)
        fits = budget_steps(steps, (now - warm) / (steps - WARM_STEPS), now - started, cfg.max_seconds)
        rate.plan(max(min(fits, rate.planned), steps + 1))
        log.info(
            "the %.0f s budget covers about %d steps: the schedule ends there", cfg.max_seconds, rate.total
        )
    return warm


def _step(
    model: Classifier,
    opt: torch.optim.Optimizer,
    docs: Documents,
    texts: np.ndarray,
    cfg: TrainConfig,
    at: Windows,
    weights: torch.Tensor | None,
    rng: np.random.Generator,
    device: torch.device,
) -> float:
    """One optimisation step on `texts`; the step's mean loss."""
    opt.zero_grad(set_to_none=True)
    labels = torch.from_numpy(docs.labels[texts]).to(device)
    divisor = float(len(texts)) if weights is None else float(weights[labels].sum())
    passes = pack(docs, texts, cfg.max_batch_tokens) if cfg.max_batch_tokens else [texts]
    total = 0.0
    for part in passes:
        rows, owner = window_rows(docs, part)
        width = int(docs.lengths[rows].max())
        ids = docs.ids[rows, :width].astype(np.int64)
        mask = (np.arange(width)[None, :] < docs.lengths[rows][:, None]).astype(np.int64)
        if cfg.word_dropout > 0:
            ids = word_dropout(ids, mask, cfg.word_dropout, at.unk_id, rng, keep_ids=at.keep_ids)
        x, m = torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device)
        logits = model.logits(x, m) if cfg.fused_attention else model(x, m)[0]  # [r, C]
        index = torch.from_numpy(owner).to(device)
        summed = torch.zeros(len(part), logits.shape[1], device=device, dtype=logits.dtype)
        counts = torch.from_numpy(docs.counts[part]).to(device=device, dtype=logits.dtype)
        text_logits = summed.index_add(0, index, logits) / counts[:, None]  # the mean of each text's windows
        part_labels = torch.from_numpy(docs.labels[part]).to(device)
        loss = F.cross_entropy(text_logits, part_labels, weight=weights, reduction="sum") / divisor
        loss.backward()  # type: ignore[no-untyped-call]
        total += float(loss.detach())
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    return total
