"""Training settings, and the choices derived from them: epoch budget, class weights, best epoch."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from attnserve.training.report.metrics import Scores
from attnserve.training.report.multi_label import MultiScores

SELECT_BY = ("macro_f1", "loss", "accuracy", "micro_f1")  # micro_f1: multi-label's (single-label: accuracy)
MULTI_LABEL_SELECT_BY = ("micro_f1", "macro_f1", "loss")
SCHEDULES = ("cosine", "linear")
CLASS_WEIGHTS = ("none", "balanced")
DEFAULT_EPOCHS = 25


@dataclass(frozen=True)
class TrainConfig:
    # 0 = 25 epochs, or more when those would take fewer than min_steps optimisation steps:
    # 300 rows make 4 steps an epoch, and 100 steps left such a model unconfident (loss 0.82).
    epochs: int = 0
    min_steps: int = 1000
    # With epochs 0: plan the epochs that make about this many steps instead of 25 (0 = off).
    # The cosine schedule then ends with the budget: on SST-2 (1,053 steps an epoch) 25
    # planned epochs left epoch 1 in its warmup and at full rate (validation 0.790), 3000
    # steps gave 0.831-0.833 at the same epoch.
    target_steps: int = 0
    # Batch 64 costs about half the CPU per sentence of batch 16 for these small models.
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_fraction: float = 0.05
    # After the warmup the learning rate falls to 0 along a half cosine, or a straight line
    # (linear: the schedule BERT-family checkpoints were fine-tuned with in their papers).
    schedule: str = "cosine"
    grad_clip: float = 1.0
    patience: int = 15  # validations without improvement before stopping (one an epoch unless eval_every)
    # Steps between validations inside an epoch, besides the one at each epoch's end (0 = only
    # that one). A fine-tuning run may be one epoch or less long: it needs several looks at
    # the validation split to keep its best point and to stop early.
    eval_every: int = 0
    # Off a terminal, a progress line every this many steps (0 = only the line a validation
    # writes): a long epoch is never silent in a log file.
    log_every: int = 0
    seed: int = 0
    device: str = "auto"
    # CPU threads for torch; 0 times a probe step under 1 thread and under every usable core,
    # keeps the faster and times it again every minute (training/loop/threads.py): on a 2-core
    # machine a second thread made the default model at 256 tokens 1.7x as fast when the
    # machine was quiet, and a step up to 5 times slower while another process used a core.
    threads: int = 0
    # Share of real tokens replaced by [UNK] while training, so unseen words at serving time
    # are not a surprise. On car-order, 0.15 rather than 0.1 raised the accuracy on held-out
    # sentence templates (whose new words are [UNK]) from a mean of 0.96 to 0.98 over 4 seeds.
    word_dropout: float = 0.15
    # Batches of rows of similar length, each padded to its own longest row (off: random batches).
    group_by_length: bool = True
    # Pad every batch to max_len, as before length-aware batching (kept to measure the difference).
    pad_to_max_len: bool = False
    # The fused attention kernel while training (off: the written-out attention export uses).
    fused_attention: bool = True
    # Padded tokens one forward/backward pass may hold (0 = the whole batch at once). A larger
    # batch runs as micro-batches whose gradients add up to the whole batch's, so the step is
    # the same while its activations shrink: for the default transformer at 256 tokens on
    # 120,000 texts the run's peak RSS was 976 MB with whole batches, 732 MB at 4,096 and
    # 652 MB at 2,048, at 0.92x-1.01x the speed in side-by-side runs (python -m bench
    # training-speed). Batches of 64 texts up to 32 tokens long are never split.
    max_batch_tokens: int = 2048
    max_seconds: float = 0.0  # wall-clock budget of this session, checked between steps; 0 = none
    # With max_seconds: once the first steps are timed, shorten the planned steps to those the
    # budget covers, so the learning-rate decay ends with the budget instead of being cut off.
    plan_to_budget: bool = False
    progress: bool = True  # steps, texts/s and time left, drawn only on a terminal
    resume: bool = False  # continue from the run directory's resume.pt
    # The best validation epoch is kept. macro_f1 (loss breaks ties) does not reward a model
    # that always answers the majority class, as accuracy does on imbalanced data. Multi-label
    # runs of attnserve-train select by micro_f1 unless --select-by says otherwise.
    select_by: str = "macro_f1"
    class_weights: str = "none"  # balanced: each class weighs as much in the loss as the others

    def __post_init__(self) -> None:
        if self.select_by not in SELECT_BY:
            raise ValueError(f"select_by must be one of {SELECT_BY}, got {self.select_by!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.class_weights not in CLASS_WEIGHTS:
            raise ValueError(f"class_weights must be one of {CLASS_WEIGHTS}, got {self.class_weights!r}")
        for name in ("epochs", "min_steps", "target_steps", "patience", "eval_every", "log_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_batch_tokens < 0:
            raise ValueError(f"max_batch_tokens must be >= 0, got {self.max_batch_tokens}")
        if self.max_seconds < 0:
            raise ValueError(f"max_seconds must be >= 0, got {self.max_seconds}")


# Fine-tuning a pretrained encoder (--pretrained), under any flag given: the BERT paper's recipe
# (AdamW at 5e-5, weight decay 0.01, batch 32, linear decay after a 6% warmup, a few epochs),
# with validation every 100 steps so the best point of a short run is kept and a run that
# stops improving stops. The encoder has its own dropout; [UNK] word dropout would feed it
# a token it barely saw in pretraining, so it is off.
FINE_TUNING: tuple[tuple[str, int | float | str | bool], ...] = (
    ("lr", 5e-5),
    ("weight_decay", 0.01),
    ("batch_size", 32),
    ("warmup_fraction", 0.06),
    ("schedule", "linear"),
    ("epochs", 3),
    ("min_steps", 0),
    ("eval_every", 100),
    ("log_every", 20),
    ("patience", 5),
    ("word_dropout", 0.0),
    ("plan_to_budget", True),
)


def planned_epochs(cfg: TrainConfig, n_train: int) -> int:
    """The epoch budget: ``cfg.epochs`` if set, else 25 (or the epochs of ``cfg.target_steps``
    steps) raised to reach ``cfg.min_steps`` steps."""
    if cfg.epochs > 0:
        return cfg.epochs
    steps_per_epoch = max(math.ceil(n_train / cfg.batch_size), 1)
    base = math.ceil(cfg.target_steps / steps_per_epoch) if cfg.target_steps else DEFAULT_EPOCHS
    return max(base, math.ceil(cfg.min_steps / steps_per_epoch))


def class_weight_tensor(cfg: TrainConfig, labels: np.ndarray, num_classes: int) -> torch.Tensor | None:
    """Inverse-frequency weights (mean 1 over the classes present) for ``balanced``, else None."""
    if cfg.class_weights == "none":
        return None
    counts = np.bincount(labels, minlength=num_classes).astype(np.float64)
    present = counts > 0
    weights = np.zeros(num_classes)
    weights[present] = counts.sum() / (present.sum() * counts[present])
    return torch.tensor(weights, dtype=torch.float32)


def selection_key(cfg: TrainConfig, scores: Scores | MultiScores) -> tuple[float, ...]:
    """Which validation result is best: higher keys win."""
    if cfg.select_by == "loss":
        return (-scores.loss,)
    return (getattr(scores, cfg.select_by), -scores.loss)
