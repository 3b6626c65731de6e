"""Resumable training: the whole loop state, written after every epoch and when time runs out.

Restoring it continues a run where it stopped: weights, optimizer and schedule, the epoch's
batch order and the position in it, running figures, the best epoch so far and every random
generator. A resumed run takes the steps an uninterrupted one would have taken (bit for bit
on the same machine, thread count and ``max_batch_tokens``).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attnserve.training.loop import distributed
from attnserve.training.loop.batching import Split
from attnserve.training.models.base import Classifier

RESUME = "resume.pt"
FORMAT = "attnserve-resume/1"
# Settings of one session that a resumed run may change without changing what it computes
# (threads and max_batch_tokens change only the order of a sum: a run that ran out of memory
# can go on in smaller micro-batches).
SESSION_FIELDS = {"max_seconds", "progress", "resume", "threads", "device", "max_batch_tokens"}
PROCESSES = "processes"  # the fingerprint's entry for the number of processes


class ResumeError(ValueError):
    """There is nothing to resume, or the saved state belongs to a different run."""


@dataclass
class LoopState:
    epoch: int = 1  # the epoch in progress, from 1
    step: int = 0  # steps of it already taken
    plan: list[torch.Tensor] | None = None  # its batches (row indices), None until it starts
    running_loss: float = 0.0  # summed over the texts seen this epoch
    correct: int = 0
    seen: int = 0
    best_key: tuple[float, ...] = (-math.inf,)
    best_state: dict[str, torch.Tensor] | None = None
    since_best: int = 0
    best_epoch: int = 0
    epochs: list[dict[str, Any]] = field(default_factory=list)  # one history row per epoch done
    seconds: float = 0.0  # training time of the sessions before this one
    finished: bool = False  # nothing left to train: the weights are the best epoch's

    def batches(self) -> list[np.ndarray]:
        assert self.plan is not None
        return [b.numpy() for b in self.plan]


def fingerprint(
    model: Classifier, config: Any, train: Split, val: Split, *, processes: int
) -> dict[str, str]:
    """What must match for a saved state to continue this run: model, settings, data and the
    number of processes (a step's batch spans them all, so it sets the schedule's steps)."""
    settings = {k: v for k, v in asdict(config).items() if k not in SESSION_FIELDS}
    return {
        "model": f"{model.family} {_canonical(asdict(model.config))}",
        "training settings": _canonical(settings),
        "training data": _digest(train),
        "validation data": _digest(val),
        PROCESSES: str(processes),
    }


def _processes(count: str | None) -> str:
    if count is None:  # a state saved before the count was recorded
        return "an unrecorded number of processes"
    return f"{count} process" if count == "1" else f"{count} processes"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _digest(split: Split) -> str:
    h = hashlib.blake2b(digest_size=16)
    for part in (split.input_ids, split.lengths, split.labels, split.groups):
        if part is not None:
            h.update(str((part.dtype, part.shape)).encode())
            h.update(np.ascontiguousarray(part).data)
    return h.hexdigest()


def save_state(
    path: Path,
    loop: LoopState,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    rng: np.random.Generator,
    prints: dict[str, str],
) -> None:
    payload = {
        "format": FORMAT,
        "fingerprint": prints,
        "loop": {k: v for k, v in vars(loop).items() if k != "best_state"},
        "best_state": loop.best_state,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "numpy": rng.bit_generator.state,
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)  # a crash while saving leaves the previous state intact


def read_state(path: Path, prints: dict[str, str]) -> dict[str, Any]:
    """The saved state at ``path``, checked against this run's ``prints``."""
    if not path.is_file():
        raise ResumeError(
            f"nothing to resume in {path.parent}: {path.name} is written after each epoch and "
            "removed when a run completes"
        )
    payload: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    if payload.get("format") != FORMAT:
        raise ResumeError(f"{path}: unknown format {payload.get('format')!r}, expected {FORMAT}")
    saved = payload["fingerprint"]
    if PROCESSES in prints and saved.get(PROCESSES) != prints[PROCESSES]:
        raise ResumeError(
            f"{path} was saved by a run on {_processes(saved.get(PROCESSES))}, and this one runs on "
            f"{_processes(prints[PROCESSES])}: a step's batch spans every process; resume on as many"
        )
    for what, value in prints.items():
        if saved.get(what) != value:
            raise ResumeError(
                f"{path} was saved by a run with different {what}; resume with the same data and flags"
            )
    return payload


def restore_state(
    payload: dict[str, Any],
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    rng: np.random.Generator,
) -> LoopState:
    """Put a read state back into the run's parts; returns the loop's own state."""
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    scheduler.load_state_dict(payload["scheduler"])
    rng.bit_generator.state = payload["numpy"]
    torch.set_rng_state(payload["torch"])
    random.setstate(payload["python"])
    loop = dict(payload["loop"])
    loop["best_key"] = tuple(loop["best_key"])
    return LoopState(**loop, best_state=payload["best_state"])


def resume_state(
    path: Path,
    seed: int,
    at: distributed.Ranks,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    rng: np.random.Generator,
    prints: dict[str, str],
) -> LoopState:
    """The saved state put back into the run's parts, on every rank from rank 0's file alone:
    the other ranks, on other machines perhaps, get it over the process group. The running
    figures saved are every rank's summed, so they stay rank 0's; each other rank draws its
    own dropout again."""
    payload = distributed.from_rank_0(lambda: read_state(path, prints), at)
    loop = restore_state(payload, model=model, optimizer=optimizer, scheduler=scheduler, rng=rng)
    if not at.main:
        loop.running_loss, loop.correct, loop.seen = 0.0, 0, 0
        torch.manual_seed(seed + at.rank + scheduler.last_epoch)
    return loop
