"""A model-agnostic training loop: AdamW, warmup + cosine or linear decay, clipping, early stopping.

The trainer sees only token ids, lengths and labels; it knows nothing about a particular
family. A wall-clock budget is checked between steps; with a state file the loop state is
saved after every epoch and when the budget runs out, and ``resume`` continues from it.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from attnserve.training.distill.loss import DistillLoss
from attnserve.training.loop import distributed
from attnserve.training.loop.batching import Split as Split  # re-exported: callers build splits for fit
from attnserve.training.loop.batching import (
    batch_tensors,
    scoring_batches,
    soft_targets,
    training_batches,
    word_dropout_augment,
)
from attnserve.training.loop.config import TrainConfig as TrainConfig  # re-exported: the loop's settings
from attnserve.training.loop.config import class_weight_tensor, planned_epochs, selection_key
from attnserve.training.loop.progress import EpochProgress, on_terminal
from attnserve.training.loop.replicated import Replicated
from attnserve.training.loop.resume import LoopState, ResumeError, fingerprint, resume_state, save_state
from attnserve.training.loop.schedule import PLAN_AFTER_STEPS, WARM_STEPS, LearningRate, budget_steps
from attnserve.training.loop.step import step_plan
from attnserve.training.loop.step import train_step as train_step  # re-exported: one optimisation step
from attnserve.training.loop.threads import Threads, training_probe, usable_cores
from attnserve.training.models.base import Classifier
from attnserve.training.report.metrics import Scores, score
from attnserve.training.text.tokenizer import CLS_ID

log = logging.getLogger(__name__)


@dataclass
class History:
    epochs: list[dict[str, Any]] = field(default_factory=list)
    best_epoch: int = 0
    seconds: float = 0.0  # training time over every session of the run
    stopped_early: bool = False  # fewer epochs than configured ran (patience or time)
    out_of_time: bool = False  # max_seconds ran out: the run can be resumed


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def pick_device(name: str) -> torch.device:
    """``name``, or the best device there is ("auto"); under torchrun, this rank's CUDA device."""
    if name != "auto":
        return distributed.local_device(torch.device(name))
    if torch.cuda.is_available():
        return distributed.local_device(torch.device("cuda"))
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


@torch.no_grad()
def predict(
    model: Classifier, split: Split, device: torch.device, batch_size: int = 64, max_tokens: int = 0
) -> tuple[np.ndarray, float]:
    """Probabilities [N, C] (in the split's row order) and mean cross-entropy over a split.

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
        total += float(F.cross_entropy(logits, labels, reduction="sum"))
        probs[idx] = torch.softmax(logits.float(), dim=-1).cpu().numpy()
    return probs, total / max(len(split), 1)


def evaluate(model: Classifier, split: Split, device: torch.device, max_tokens: int = 0) -> Scores:
    probs, loss = predict(model, split, device, max_tokens=max_tokens)
    return score(split.labels, probs, loss)


def make_optimizer(
    model: Classifier, cfg: TrainConfig, steps: int
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with a linear warmup over ``warmup_fraction`` of ``steps``, then ``cfg.schedule``'s
    decay to 0 (cosine or linear: training/loop/schedule.py)."""
    # PyTorch's per-tensor update, on purpose: foreach=True gives the same weights bit for bit
    # and its step alone runs 2.5x as fast, yet car-order's epochs took 4.5-4.8 s with it
    # against 4.05 s without (2 threads, taken in turns); fused=True rounds differently.
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, LearningRate(cfg, steps))


def fit(
    model: Classifier,
    train: Split,
    val: Split,
    cfg: TrainConfig,
    *,
    unk_id: int = 1,
    keep_first_token: bool = False,
    state_path: Path | None = None,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
    distill: DistillLoss | None = None,
) -> History:
    """Train in place, restore the weights of the best validation, return the history.

    When ``cfg.max_seconds`` runs out the best weights so far are restored as well, and with
    ``state_path`` the run can be continued later (``cfg.resume``). ``on_epoch`` gets each
    validation's history row once it is recorded (and, at an epoch's end, saved); an exception
    it raises ends the run. With ``distill`` the loss learns ``train.soft`` (a teacher's
    logits) as well. Under torchrun every rank trains on its slice of each step's batch and
    rank 0 validates (training/loop/distributed.py); the ranks' weights are compared after
    every epoch, and replicas that differ end the run.
    """
    if cfg.resume and state_path is None:
        raise ResumeError("resuming needs the run directory whose resume.pt to continue from")
    seed_everything(cfg.seed)
    at = distributed.ranks()
    device = pick_device(cfg.device)
    model.to(device)
    # torch's CPU threads: set (and timed again as the run goes) only when the CPU trains.
    # Ranks sharing a machine share its cores, and a probe step outside DDP would upset it.
    threads = None
    if device.type == "cpu":
        fixed = cfg.threads or (max(usable_cores() // at.local_world, 1) if at.world > 1 else 0)
        threads = Threads(fixed, lambda: training_probe(model, train, cfg))
        threads.start()
    stepper: Classifier = model if at.world == 1 else Replicated(model, device)
    if at.world > 1:
        torch.manual_seed(cfg.seed + at.rank)  # the weights are rank 0's; dropout differs per rank
    rng = np.random.default_rng(cfg.seed)  # the batch order: the same on every rank
    epochs = planned_epochs(cfg, len(train) // at.world)
    drawn = cfg.batch_size * at.world  # a step's rows over every rank
    steps_per_epoch = max(len(train) // drawn + int(len(train) % drawn >= at.world), 1)
    opt, sched = make_optimizer(model, cfg, steps=epochs * steps_per_epoch)
    rate = sched.lr_lambdas[0]
    assert isinstance(rate, LearningRate)
    gold = train.labels[train.labels >= 0]  # distillation's augmented rows have none
    weights = class_weight_tensor(cfg, gold, int(model.config.num_classes))
    weights = None if weights is None else weights.to(device)
    keep = {CLS_ID} if keep_first_token else set()
    own = rng if at.world == 1 else np.random.default_rng([cfg.seed, at.rank])
    augment = word_dropout_augment(cfg.word_dropout, unk_id, own, keep)
    prints = fingerprint(model, cfg, train, val)
    parts: dict[str, Any] = {"model": model, "optimizer": opt, "scheduler": sched, "rng": rng}
    parts["prints"] = prints
    loop = resume_state(state_path, cfg.seed, at, **parts) if cfg.resume and state_path else LoopState()
    pad_to = train.input_ids.shape[1] if cfg.pad_to_max_len else None
    bar = EpochProgress(cfg.progress and at.main, epochs, log_every=cfg.log_every if at.main else 0)
    start = time.perf_counter()
    session_steps, validated_at, warm = 0, sched.last_epoch, start
    out_of_time = False
    digests: list[str] = []  # the ranks' weight digests after the last epoch's steps

    def validate(*, epoch_end: bool) -> None:
        nonlocal validated_at
        seconds = loop.seconds + time.perf_counter() - start
        lr, count = float(sched.get_last_lr()[0]), threads.count if threads else None
        figures = _figures(loop, at)  # every rank's rows, not rank 0's alone
        if at.main:
            _validate(loop, figures, model, val, device, cfg, epochs, step=sched.last_epoch, lr=lr,
                      seconds=seconds, threads=count)  # fmt: skip
        stop = at.main and loop.since_best >= cfg.patience
        last = (epoch_end and loop.epoch >= epochs) or sched.last_epoch >= rate.total
        loop.finished = distributed.from_main(stop, at) or last
        validated_at = sched.last_epoch
        if on_epoch is not None and at.main and not epoch_end:
            on_epoch(loop.epochs[-1])

    try:
        while not loop.finished and not out_of_time:
            if loop.plan is None:
                plan = training_batches(train, drawn, rng, by_length=cfg.group_by_length)
                loop.plan = [torch.from_numpy(b) for b in plan]
            batches = distributed.shard(loop.batches(), at)
            bar.start(loop.epoch, sum(len(b) for b in batches), len(batches), loop.seen, loop.step)
            model.train()
            while loop.step < len(batches) and not loop.finished:
                late = bool(
                    session_steps and cfg.max_seconds and time.perf_counter() - start > cfg.max_seconds
                )
                if late and at.world == 1:  # before the batch: a resumed run draws it again
                    out_of_time = True
                    break
                idx = batches[loop.step]
                batch = batch_tensors(train, idx, device, pad_to=pad_to, augment=augment)
                teacher = soft_targets(train, idx, device) if distill is not None else None
                soft = None if teacher is None or distill is None else (teacher, distill)
                shared, weight = None, 1.0
                if at.world > 1:
                    needed, weight = step_plan(batch, cfg, weights, distilled=soft is not None)
                    shared = distributed.agree(needed, weight, len(idx), late, at)
                    if shared.stop:
                        out_of_time = True
                        break
                if threads is not None:
                    threads.between_steps()
                loss, correct = train_step(stepper, opt, batch, cfg, weights, soft, shared)
                sched.step()
                loop.step, session_steps = loop.step + 1, session_steps + 1
                # A rank's share of the step's mean loss, counted for the step's rows: the
                # ranks' running losses add up to the whole run's.
                loop.running_loss += loss * (len(idx) if shared is None else shared.rows)
                loop.correct += correct
                loop.seen += len(idx)
                bar.update(len(idx), loss if shared is None else loss * shared.total / weight)
                planning = cfg.plan_to_budget and cfg.max_seconds > 0
                if planning and session_steps == WARM_STEPS:
                    warm = time.perf_counter()
                timed = session_steps - WARM_STEPS
                if planning and session_steps == PLAN_AFTER_STEPS:
                    _plan_to_budget(rate, at, sched.last_epoch, warm, timed, start, cfg)
                if cfg.eval_every and sched.last_epoch % cfg.eval_every == 0 and loop.step < len(batches):
                    validate(epoch_end=False)
                    if planning and not loop.finished and session_steps > PLAN_AFTER_STEPS:
                        _plan_to_budget(rate, at, sched.last_epoch, warm, timed, start, cfg)
                    model.train()
                if sched.last_epoch >= rate.total and rate.total < rate.planned:
                    break  # the budget's plan is done: the epoch ends here
            bar.close()
            if at.world > 1:
                digests = distributed.same_weights(model, at, sched.last_epoch)
            looked = sched.last_epoch > validated_at  # steps since the last validation
            if not out_of_time:
                if looked:
                    validate(epoch_end=True)
                loop.epoch, loop.step, loop.plan = loop.epoch + 1, 0, None
                loop.running_loss, loop.correct, loop.seen = 0.0, 0, 0
            elif cfg.eval_every and looked:
                validate(epoch_end=False)  # the steps since the last look may hold the best point
            if loop.finished and loop.best_state is not None:
                model.load_state_dict(loop.best_state)
            if state_path is not None:
                running_loss, right, seen = _figures(loop, at)
                spent = dataclasses.replace(
                    loop,
                    seconds=loop.seconds + time.perf_counter() - start,
                    running_loss=running_loss,
                    correct=int(right),
                    seen=int(seen),
                )
                if at.main:
                    save_state(state_path, spent, **parts)
            if on_epoch is not None and at.main and not out_of_time and looked:
                on_epoch(loop.epochs[-1])
    finally:
        bar.close()
    if out_of_time and loop.best_state is not None:
        model.load_state_dict(loop.best_state)
    if at.world > 1 and at.main:
        log.info("weights after training, sha256 by process: %s", ", ".join(digests))
    model.eval()
    return History(
        epochs=loop.epochs,
        best_epoch=loop.best_epoch,
        seconds=loop.seconds + time.perf_counter() - start,
        stopped_early=len({row["epoch"] for row in loop.epochs}) < epochs,
        out_of_time=out_of_time,
    )


def _plan_to_budget(
    rate: LearningRate,
    at: distributed.Ranks,
    steps: int,
    since: float,
    timed: int,
    start: float,
    cfg: TrainConfig,
) -> None:
    """End the learning-rate decay where the budget ends, at the pace of the ``timed`` steps
    taken since ``since`` (never later than first planned); every rank keeps the slowest
    rank's plan. ``start``: when this session began."""
    now = time.perf_counter()
    fits = budget_steps(steps, (now - since) / max(timed, 1), now - start, cfg.max_seconds)
    fits = distributed.least(fits, at)
    total = max(min(fits, rate.planned), steps + 1)
    if total != rate.total:
        if at.main:
            log.info("the %.0f s budget covers about %d steps of the %d planned: the schedule ends there",
                     cfg.max_seconds, total, rate.planned)  # fmt: skip
        rate.plan(total)


def _figures(loop: LoopState, at: distributed.Ranks) -> tuple[float, float, float]:
    """The epoch's running loss, right and seen rows, over every rank."""
    loss, correct, seen = distributed.summed([loop.running_loss, loop.correct, loop.seen], at)
    return loss, correct, seen


def _validate(
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
    row = {
        "epoch": loop.epoch,
        "step": step,  # steps so far, over the whole run
        "train_loss": running_loss / max(seen, 1),
        "train_accuracy": correct / max(seen, 1),
        "lr": lr,
        "seconds": seconds,
        "threads": threads,  # torch's CPU count at this point (None off the CPU)
        **{f"val_{k}": v for k, v in val_scores.as_dict().items() if k != "n"},
    }
    loop.epochs.append(row)
    # One line a validation where no bar is drawn (a log file, a pipe, CI): never silent.
    level = logging.DEBUG if cfg.progress and on_terminal() else logging.INFO
    log.log(level, "epoch %d/%d  step %d  train loss %.4f  val accuracy %.4f  val loss %.4f  %.0f s",
            loop.epoch, epochs, row["step"], row["train_loss"], val_scores.accuracy, val_scores.loss,
            seconds)  # fmt: skip
    key = selection_key(cfg, val_scores)
    if key > loop.best_key:
        loop.best_key, loop.since_best, loop.best_epoch = key, 0, loop.epoch
        loop.best_state = copy.deepcopy(model.state_dict())
    else:
        loop.since_best += 1
