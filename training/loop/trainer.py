"""A model-agnostic training loop: AdamW, warmup + cosine or linear decay, clipping, early stopping.

The trainer sees only token ids, lengths and labels; it knows nothing about a particular
family. A wall-clock budget is checked between steps; with a state file the loop state is
saved after every epoch and when the budget runs out, and ``resume`` continues from it.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnserve.training.distill.loss import DistillLoss
from attnserve.training.loop import distributed
from attnserve.training.loop.batching import Split as Split  # re-exported: callers build splits for fit
from attnserve.training.loop.config import TrainConfig as TrainConfig  # re-exported: the loop's settings
from attnserve.training.loop.resume import ResumeError
from attnserve.training.loop.scoring import evaluate as evaluate  # re-exported: one split's scores
from attnserve.training.loop.scoring import predict as predict  # re-exported: one split's probabilities
from attnserve.training.loop.session import Session
from attnserve.training.loop.session import make_optimizer as make_optimizer  # re-exported
from attnserve.training.loop.step import train_step as train_step  # re-exported: one optimisation step
from attnserve.training.models.base import Classifier

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
    device = pick_device(cfg.device)
    model.to(device)
    session = Session(model, train, val, cfg, device, unk_id=unk_id, keep_first_token=keep_first_token,
                      state_path=state_path, on_epoch=on_epoch, distill=distill)  # fmt: skip
    try:
        while session.running:
            session.epoch()
    finally:
        session.bar.close()
    loop = session.loop
    if session.out_of_time and loop.best_state is not None:
        model.load_state_dict(loop.best_state)
    if session.at.world > 1 and session.at.main:
        log.info("weights after training, sha256 by process: %s", ", ".join(session.digests))
    model.eval()
    return History(
        epochs=loop.epochs,
        best_epoch=loop.best_epoch,
        seconds=loop.seconds + time.perf_counter() - session.start,
        stopped_early=len({row["epoch"] for row in loop.epochs}) < session.epochs,
        out_of_time=session.out_of_time,
    )
