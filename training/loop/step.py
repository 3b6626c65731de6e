"""One optimisation step, taken a micro-batch at a time when the batch holds many tokens.

What a training step keeps for its backward pass grows with the batch's padded tokens: for
the default transformer a batch of 64 texts at 256 tokens saves about 310 MB of activations,
twice the model, its optimizer state and the id matrix of 120,000 texts together. So a
batch above ``max_batch_tokens`` padded tokens runs as micro-batches of rows of similar
length, each padded to its own longest row. Each micro-batch adds its rows' summed loss
divided by the whole batch's weight to the gradient, so the accumulated gradient is the
whole batch's mean-loss gradient (up to rounding), and clipping and the optimizer see the
same step. Dropout masks are drawn per micro-batch: the same distribution, other draws. A
batch within the limit runs exactly as before, in one pass.

Under DistributedDataParallel every forward and backward is a collective, so each rank must
run as many as the others whatever its rows' lengths: the ranks agree on the most
micro-batches any needs (training/loop/distributed.py ``agree``), a rank with fewer runs
zero-weight passes over one short row to make up the count, and only the last backward
synchronises (``no_sync`` before it). Each rank's rows divide by the whole step's weight and
are multiplied back by the ranks DDP averages over, so the applied gradient is the whole
step's mean-loss gradient.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import numpy as np
import torch
import torch.nn.functional as F

from attnserve.training.distill.loss import DistillLoss
from attnserve.training.loop.batching import capped_runs
from attnserve.training.loop.config import TrainConfig
from attnserve.training.loop.distributed import Shared
from attnserve.training.loop.replicated import Replicated
from attnserve.training.models.base import Classifier

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # ids [B, T], mask [B, T], labels [B] or [B, C]
# Multi-label (labels [B, C] 0/1): one sigmoid per label. A row's loss is the mean over its labels,
# so summed rows divided by the batch's rows are BCEWithLogitsLoss's mean over every cell, and
# micro-batches add up to the whole batch as cross-entropy's rows do.
_BCE_CELLS = torch.nn.BCEWithLogitsLoss(reduction="none")
Soft = tuple[torch.Tensor, DistillLoss]  # a teacher's logits [B, C] and the loss that uses them


def micro_batches(
    lengths: np.ndarray, width: int, max_tokens: int, *, fixed_width: bool
) -> list[tuple[np.ndarray, int]]:
    """Rows (positions in the batch) and padded width of each micro-batch of a batch ``width`` wide.

    One micro-batch of every row when the batch holds at most ``max_tokens`` padded tokens (or
    ``max_tokens`` is 0); otherwise rows sorted by length, cut so that rows x width stays
    within ``max_tokens`` (a row longer than that goes alone). With ``fixed_width`` every
    micro-batch keeps the batch's width (batches padded to max_len on purpose).
    """
    n = len(lengths)
    if max_tokens <= 0 or n * width <= max_tokens:
        return [(np.arange(n), width)]
    order = np.argsort(lengths, kind="stable")
    widths = np.full(n, width) if fixed_width else np.maximum(lengths[order], 1)
    return [(order[run], int(widths[run.stop - 1])) for run in capped_runs(widths, n, max_tokens)]


def step_plan(
    batch: Batch, cfg: TrainConfig, class_weights: torch.Tensor | None, *, distilled: bool
) -> tuple[int, float]:
    """The micro-batches ``batch`` runs as and what its mean loss divides by (what ranks agree on).

    Cross-entropy's mean with class weights divides by the rows' summed weights; the
    distillation loss's by the rows.
    """
    ids, mask, labels = batch
    lengths = mask.sum(dim=1).cpu().numpy()  # [B]
    parts = micro_batches(lengths, ids.shape[1], cfg.max_batch_tokens, fixed_width=cfg.pad_to_max_len)
    return len(parts), _divisor(labels, class_weights, distilled=distilled)


def _divisor(labels: torch.Tensor, class_weights: torch.Tensor | None, *, distilled: bool) -> float:
    """What the batch's mean loss divides its summed loss by."""
    if class_weights is None or distilled:
        return float(len(labels))
    return float(class_weights[labels].sum())


def bce_rows(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Each multi-label row's loss [B]: binary cross-entropy per label, averaged over the labels."""
    cells: torch.Tensor = _BCE_CELLS(logits, labels)  # [B, C]
    return cells.mean(dim=1)


def right_rows(logits: torch.Tensor, labels: torch.Tensor) -> int:
    """Rows predicted right: the argmax class, or (multi-label) every label at logit 0 (p = 0.5)."""
    if labels.dim() == 2:
        return int(((logits > 0) == labels.bool()).all(dim=1).sum())
    return int((logits.argmax(-1) == labels).sum())


def _logits(model: Classifier, ids: torch.Tensor, mask: torch.Tensor, cfg: TrainConfig) -> torch.Tensor:
    return model.logits(ids, mask) if cfg.fused_attention else model(ids, mask)[0]


def accumulate_gradients(
    model: Classifier,
    batch: Batch,
    cfg: TrainConfig,
    class_weights: torch.Tensor | None = None,
    soft: Soft | None = None,
    shared: Shared | None = None,
) -> tuple[float, int]:
    """Add the gradient of the batch's mean loss to the parameters' ``.grad``.

    Returns the batch's mean loss (weighted by ``class_weights`` as the loss is) and the
    number of rows predicted right. With ``soft`` the loss is the distillation loss. With
    ``shared`` the batch is this rank's part of a step over several: the loss returned is its
    share of the step's mean loss (the ranks' shares add up to it).
    """
    ids, mask, labels = batch
    lengths = mask.sum(dim=1).cpu().numpy()  # [B]
    parts = micro_batches(lengths, ids.shape[1], cfg.max_batch_tokens, fixed_width=cfg.pad_to_max_len)
    if shared is None:
        if soft is None and len(parts) == 1:
            logits = _logits(model, ids, mask, cfg)  # [B, C]
            if labels.dim() == 2:
                loss = bce_rows(logits, labels).mean()
            else:
                loss = F.cross_entropy(logits, labels, weight=class_weights)
            loss.backward()  # type: ignore[no-untyped-call]
            return float(loss.detach()), right_rows(logits.detach(), labels)
        # One process: the step is this batch alone, in as many passes as it needs.
        total = _divisor(labels, class_weights, distilled=soft is not None)
        shared = Shared(parts=len(parts), total=total, rows=len(labels), world=1, stop=False)
    return _gradients_in_passes(model, batch, parts, cfg, class_weights, soft, shared)


def _gradients_in_passes(
    model: Classifier,
    batch: Batch,
    parts: list[tuple[np.ndarray, int]],
    cfg: TrainConfig,
    class_weights: torch.Tensor | None,
    soft: Soft | None,
    shared: Shared,
) -> tuple[float, int]:
    """The rows' gradient in ``shared.parts`` passes, each adding its rows' share of the step's
    mean loss; under DDP the last pass synchronises (with one process ``shared`` is the batch's
    own plan, and every pass is one of its micro-batches)."""
    ids, mask, labels = batch
    wanted = labels if soft is None else torch.where(labels >= 0, labels, soft[0].argmax(-1))  # [B]
    lengths = mask.sum(dim=1).cpu().numpy()  # [B]
    short = int(np.argmin(lengths))
    filler = (np.array([short]), ids.shape[1] if cfg.pad_to_max_len else max(int(lengths[short]), 1))
    loss_sum, correct = 0.0, 0
    for i in range(shared.parts):
        real = i < len(parts)
        rows, width = parts[i] if real else filler
        at = torch.from_numpy(rows).to(ids.device)
        with _syncing(model, last=i == shared.parts - 1):
            logits = _logits(model, ids[at, :width], mask[at, :width], cfg)  # [b, C]
            share = _summed_loss(logits, at, labels, class_weights, soft) / shared.total
            # DDP divides the summed gradients by the ranks; a filler pass adds nothing.
            (share * (shared.world if real else 0.0)).backward()  # type: ignore[no-untyped-call]
        if real:
            loss_sum += float(share.detach())
            correct += right_rows(logits.detach(), wanted[at])
    return loss_sum, correct


def _summed_loss(
    logits: torch.Tensor,
    at: torch.Tensor,
    labels: torch.Tensor,
    class_weights: torch.Tensor | None,
    soft: Soft | None,
) -> torch.Tensor:
    """The summed loss of rows ``at`` (cross-entropy, binary cross-entropy for multi-label
    labels, or the distillation loss with ``soft``)."""
    if soft is None and labels.dim() == 2:
        return bce_rows(logits, labels[at]).sum()
    if soft is None:
        return F.cross_entropy(logits, labels[at], weight=class_weights, reduction="sum")
    teacher, loss_fn = soft
    return loss_fn.rows(logits, teacher[at], labels[at], class_weights).sum()


def _syncing(model: Classifier, *, last: bool) -> AbstractContextManager[None]:
    """Gradients stay on this rank until the step's last backward, which averages them."""
    if isinstance(model, Replicated) and not last:
        return model.no_sync()
    return nullcontext()


def train_step(
    model: Classifier,
    opt: torch.optim.Optimizer,
    batch: Batch,
    cfg: TrainConfig,
    class_weights: torch.Tensor | None = None,
    soft: Soft | None = None,
    shared: Shared | None = None,
) -> tuple[float, int]:
    """One optimizer step on (ids, mask, labels); returns the batch's mean loss and correct count
    (with ``shared``: this rank's share of the step's loss, as accumulate_gradients)."""
    opt.zero_grad(set_to_none=True)
    loss, correct = accumulate_gradients(model, batch, cfg, class_weights, soft, shared)
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    return loss, correct
