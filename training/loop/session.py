"""One ``fit`` call's loop: its setup, an epoch, a step, a validation, the end of an epoch.

Under torchrun every rank trains on its slice of each step's batch and rank 0 validates
(training/loop/distributed.py); the ranks' weights are compared after every epoch.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnserve.training.distill.loss import DistillLoss
from attnserve.training.loop import distributed
from attnserve.training.loop.batching import (
    Split,
    batch_tensors,
    soft_targets,
    training_batches,
    word_dropout_augment,
)
from attnserve.training.loop.config import TrainConfig, class_weight_tensor, planned_epochs
from attnserve.training.loop.progress import EpochProgress
from attnserve.training.loop.replicated import Replicated
from attnserve.training.loop.resume import LoopState, fingerprint, resume_state, save_state
from attnserve.training.loop.schedule import PLAN_AFTER_STEPS, WARM_STEPS, LearningRate, budget_steps
from attnserve.training.loop.scoring import record_validation
from attnserve.training.loop.step import step_plan, train_step
from attnserve.training.loop.threads import Threads, training_probe, usable_cores
from attnserve.training.models.base import Classifier
from attnserve.training.text.tokenizer import CLS_ID

# The loop's lines go out under one name, whichever of its modules writes them.
log = logging.getLogger("attnserve.training.loop.trainer")
OnEpoch = Callable[[dict[str, Any]], None]


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


class Session:
    """The loop state of one fit, from its setup (or a resumed state) to its last epoch."""

    def __init__(self, model: Classifier, train: Split, val: Split, cfg: TrainConfig, device: torch.device,
                 *, unk_id: int, keep_first_token: bool, state_path: Path | None, on_epoch: OnEpoch | None,
                 distill: DistillLoss | None) -> None:  # fmt: skip
        self.model, self.train, self.val, self.cfg, self.device = model, train, val, cfg, device
        self.state_path, self.on_epoch, self.distill = state_path, on_epoch, distill
        self.at = at = distributed.ranks()
        # torch's CPU threads: set (and timed again as the run goes) only when the CPU trains.
        # Ranks sharing a machine share its cores, and a probe step outside DDP would upset it.
        self.threads: Threads | None = None
        if device.type == "cpu":
            fixed = cfg.threads or (max(usable_cores() // at.local_world, 1) if at.world > 1 else 0)
            self.threads = Threads(fixed, lambda: training_probe(model, train, cfg))
            self.threads.start()
        self.stepper: Classifier = model if at.world == 1 else Replicated(model, device)
        if at.world > 1:
            torch.manual_seed(cfg.seed + at.rank)  # the weights are rank 0's; dropout differs per rank
        self.rng = np.random.default_rng(cfg.seed)  # the batch order: the same on every rank
        self.epochs = planned_epochs(cfg, len(train) // at.world)
        self.drawn = cfg.batch_size * at.world  # a step's rows over every rank
        steps_per_epoch = max(len(train) // self.drawn + int(len(train) % self.drawn >= at.world), 1)
        self.opt, self.sched = make_optimizer(model, cfg, steps=self.epochs * steps_per_epoch)
        rate = self.sched.lr_lambdas[0]
        assert isinstance(rate, LearningRate)
        self.rate = rate
        gold = train.labels[train.labels >= 0]  # distillation's augmented rows have none
        weights = class_weight_tensor(cfg, gold, int(model.config.num_classes))
        self.weights = None if weights is None else weights.to(device)
        own = self.rng if at.world == 1 else np.random.default_rng([cfg.seed, at.rank])
        keep = {CLS_ID} if keep_first_token else set()
        self.augment = word_dropout_augment(cfg.word_dropout, unk_id, own, keep)
        self.parts: dict[str, Any] = {"model": model, "optimizer": self.opt, "scheduler": self.sched}
        self.parts |= {"rng": self.rng, "prints": fingerprint(model, cfg, train, val, processes=at.world)}
        self.loop = LoopState()
        if cfg.resume and state_path is not None:
            self.loop = resume_state(state_path, cfg.seed, at, **self.parts)
        self.pad_to = train.input_ids.shape[1] if cfg.pad_to_max_len else None
        every = cfg.log_every if at.main else 0
        self.bar = EpochProgress(cfg.progress and at.main, self.epochs, log_every=every)
        self.start = self.warm = time.perf_counter()
        self.session_steps, self.validated_at = 0, self.sched.last_epoch
        self.out_of_time = False
        self.digests: list[str] = []  # the ranks' weight digests after the last epoch's steps

    @property
    def running(self) -> bool:
        return not self.loop.finished and not self.out_of_time

    def epoch(self) -> None:
        """The steps of one epoch (or of what is left of it), then its end."""
        loop, at = self.loop, self.at
        if loop.plan is None:
            plan = training_batches(self.train, self.drawn, self.rng, by_length=self.cfg.group_by_length)
            loop.plan = [torch.from_numpy(b) for b in plan]
        batches = distributed.shard(loop.batches(), at)
        self.bar.start(loop.epoch, sum(len(b) for b in batches), len(batches), loop.seen, loop.step)
        self.model.train()
        while loop.step < len(batches) and not loop.finished:
            if not self.step(batches[loop.step]) or not self.between_steps(len(batches)):
                break
        self.bar.close()
        if at.world > 1:
            self.digests = distributed.same_weights(self.model, at, self.sched.last_epoch)
        self.end_epoch()

    def step(self, idx: np.ndarray) -> bool:
        """One optimisation step on the rows ``idx``; False when the time is up before it."""
        cfg, at, loop = self.cfg, self.at, self.loop
        late = bool(
            self.session_steps and cfg.max_seconds and time.perf_counter() - self.start > cfg.max_seconds
        )
        if late and at.world == 1:  # before the batch: a resumed run draws it again
            self.out_of_time = True
            return False
        batch = batch_tensors(self.train, idx, self.device, pad_to=self.pad_to, augment=self.augment)
        teacher = soft_targets(self.train, idx, self.device) if self.distill is not None else None
        soft = None if teacher is None or self.distill is None else (teacher, self.distill)
        shared, weight = None, 1.0
        if at.world > 1:
            needed, weight = step_plan(batch, cfg, self.weights, distilled=soft is not None)
            shared = distributed.agree(needed, weight, len(idx), late, at)
            if shared.stop:
                self.out_of_time = True
                return False
        if self.threads is not None:
            self.threads.between_steps()
        loss, correct = train_step(self.stepper, self.opt, batch, cfg, self.weights, soft, shared)
        self.sched.step()
        loop.step, self.session_steps = loop.step + 1, self.session_steps + 1
        # A rank's share of the step's mean loss, counted for the step's rows: the ranks'
        # running losses add up to the whole run's.
        loop.running_loss += loss * (len(idx) if shared is None else shared.rows)
        loop.correct += correct
        loop.seen += len(idx)
        self.bar.update(len(idx), loss if shared is None else loss * shared.total / weight)
        return True

    def between_steps(self, n_batches: int) -> bool:
        """The budget's plan and the validations inside an epoch; False when the plan ends it."""
        cfg, steps, last = self.cfg, self.session_steps, self.sched.last_epoch
        planning = cfg.plan_to_budget and cfg.max_seconds > 0
        if planning and steps == WARM_STEPS:
            self.warm = time.perf_counter()
        if planning and steps == PLAN_AFTER_STEPS:
            self.plan_to_budget(steps - WARM_STEPS)
        if cfg.eval_every and last % cfg.eval_every == 0 and self.loop.step < n_batches:
            self.validate(epoch_end=False)
            if planning and not self.loop.finished and steps > PLAN_AFTER_STEPS:
                self.plan_to_budget(steps - WARM_STEPS)
            self.model.train()
        # The budget's plan is done: the epoch ends here.
        return not (last >= self.rate.total and self.rate.total < self.rate.planned)

    def validate(self, *, epoch_end: bool) -> None:
        loop, at, cfg = self.loop, self.at, self.cfg
        seconds = loop.seconds + time.perf_counter() - self.start
        lr, count = float(self.sched.get_last_lr()[0]), self.threads.count if self.threads else None
        figures = self.figures()  # every rank's rows, not rank 0's alone
        if at.main:
            record_validation(loop, figures, self.model, self.val, self.device, cfg, self.epochs,
                              step=self.sched.last_epoch, lr=lr, seconds=seconds, threads=count)  # fmt: skip
        stop = at.main and loop.since_best >= cfg.patience
        last = (epoch_end and loop.epoch >= self.epochs) or self.sched.last_epoch >= self.rate.total
        loop.finished = distributed.from_main(stop, at) or last
        self.validated_at = self.sched.last_epoch
        if self.on_epoch is not None and at.main and not epoch_end:
            self.on_epoch(loop.epochs[-1])

    def end_epoch(self) -> None:
        """Validate what the epoch's steps changed, keep the best weights, save the loop state."""
        loop, cfg, at = self.loop, self.cfg, self.at
        looked = self.sched.last_epoch > self.validated_at  # steps since the last validation
        if not self.out_of_time:
            if looked:
                self.validate(epoch_end=True)
            loop.epoch, loop.step, loop.plan = loop.epoch + 1, 0, None
            loop.running_loss, loop.correct, loop.seen = 0.0, 0, 0
        elif cfg.eval_every and looked:
            self.validate(epoch_end=False)  # the steps since the last look may hold the best point
        if loop.finished and loop.best_state is not None:
            self.model.load_state_dict(loop.best_state)
        if self.state_path is not None:
            running_loss, right, seen = self.figures()
            seconds = loop.seconds + time.perf_counter() - self.start
            spent = dataclasses.replace(
                loop, seconds=seconds, running_loss=running_loss, correct=int(right), seen=int(seen)
            )
            if at.main:
                save_state(self.state_path, spent, **self.parts)
        if self.on_epoch is not None and at.main and not self.out_of_time and looked:
            self.on_epoch(loop.epochs[-1])

    def plan_to_budget(self, timed: int) -> None:
        """End the learning-rate decay where the budget ends, at the pace of the ``timed`` steps
        taken since warm-up (never later than first planned); every rank keeps the slowest
        rank's plan."""
        cfg, rate, steps = self.cfg, self.rate, self.sched.last_epoch
        now = time.perf_counter()
        fits = budget_steps(steps, (now - self.warm) / max(timed, 1), now - self.start, cfg.max_seconds)
        fits = distributed.least(fits, self.at)
        total = max(min(fits, rate.planned), steps + 1)
        if total != rate.total:
            if self.at.main:
                log.info("the %.0f s budget covers about %d steps of the %d planned: the schedule ends there",
                         cfg.max_seconds, total, rate.planned)  # fmt: skip
            rate.plan(total)

    def figures(self) -> tuple[float, float, float]:
        """The epoch's running loss, right and seen rows, over every rank."""
        loop = self.loop
        loss, correct, seen = distributed.summed([loop.running_loss, loop.correct, loop.seen], self.at)
        return loss, correct, seen
