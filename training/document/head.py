"""The document head, trained in PyTorch on cached windows, and every combination's figures.

Window w of a text scores s_w = query · tanh(weights @ x_w + bias), x_w its logits z_w [C] or
[v_w; z_w], its pooled vector (the graph's `vector` output) then its logits; a = softmax(s)
over the text's windows; the text's logits are Σ a_w z_w, trained with cross-entropy against
the text's label. The query starts at zero, so the head starts as the mean of the windows and
learns from there. Vectors are standardised on the training windows while it learns, the
scaling folded into weights and bias after, so the served head reads the raw vectors. Each
weight decay asked is tried (AdamW); the head kept is the epoch and decay of the lowest
validation loss. Seconds on a CPU.

Figures are read with the server's own fold (service/engine/request/windows.py `combined`:
mean, max and the head's `DocumentHead.scores` in numpy), so what training reports is what a
server answers; truncate is the first window alone (a text cut at its head when the window
is the model's max_len).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from attnserve.service.bundle import COMBINES, DocumentHead, HeadInput, LongTexts, Scoring
from attnserve.service.engine.request.windows import combined

log = logging.getLogger(__name__)
TRUNCATE = "truncate"


@dataclass(frozen=True)
class Part:
    """Some texts as their windows, padded: logits [N, W, C], vectors [N, W, D] where the head
    reads them, and the windows' mask [N, W]."""

    logits: np.ndarray
    mask: np.ndarray
    labels: np.ndarray  # [N]
    vectors: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def windows(self) -> int:
        return int(self.mask.sum())

    def inputs(self) -> np.ndarray:
        """[N, W, F] what the head reads of each window."""
        return self.logits if self.vectors is None else np.concatenate([self.vectors, self.logits], axis=2)

    def text(self, i: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Text i's windows: logits [W, C], vectors [W, D] or None."""
        count = int(self.mask[i].sum())
        vectors = None if self.vectors is None else np.asarray(self.vectors[i, :count])
        return np.asarray(self.logits[i, :count]), vectors


def _laid(rows: np.ndarray, counts: np.ndarray, picked: np.ndarray, widest: int) -> np.ndarray:
    starts = np.concatenate([[0], np.cumsum(counts)])
    out = np.zeros((len(picked), widest, rows.shape[1]), np.float32)
    for row, i in enumerate(picked):
        out[row, : int(counts[i])] = rows[starts[i] : starts[i] + int(counts[i])]
    return out


def make_part(
    logits: np.ndarray,
    counts: np.ndarray,
    picked: np.ndarray,
    labels: np.ndarray,
    vectors: np.ndarray | None = None,
) -> Part:
    """The texts `picked` (indexes into `counts`) of window logits [R, C] (and vectors [R, D])
    laid out text after text."""
    widest = int(counts[picked].max()) if len(picked) else 1
    mask = np.arange(widest)[None, :] < counts[picked][:, None]
    kept = None if vectors is None else _laid(vectors, counts, picked, widest)
    return Part(_laid(logits, counts, picked, widest), mask, np.asarray(labels, np.int64), kept)


@dataclass(frozen=True)
class HeadSettings:
    hidden: int = 8
    epochs: int = 20
    steps: int = 0  # optimisation steps in all (0: --epochs decides)
    batch_size: int = 64
    lr: float = 0.01
    seed: int = 0
    weight_decays: tuple[float, ...] = (0.0,)  # each tried; validation loss picks one


class HeadNet(nn.Module):
    def __init__(self, width: int, hidden: int, seed: int, shift: np.ndarray, scale: np.ndarray) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.weights = nn.Parameter(torch.randn(hidden, width, generator=generator) / math.sqrt(width))
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.query = nn.Parameter(torch.zeros(hidden))  # zero: every window weighs the same at first
        self.shift, self.scale = torch.from_numpy(shift), torch.from_numpy(scale)  # [F] standardising

    def forward(self, x: torch.Tensor, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[B, C] the texts' logits from their windows' inputs [B, W, F] and logits [B, W, C]."""
        x = (x - self.shift) / self.scale
        scores = torch.tanh(x @ self.weights.T + self.bias) @ self.query  # [B, W]
        attention = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=1)
        return (attention.unsqueeze(-1) * logits).sum(dim=1)

    def head(self, reads: HeadInput) -> DocumentHead:
        """The head on raw inputs: W (x - m) / s + b = (W / s) x + (b - (W / s) m)."""
        with torch.no_grad():
            weights = self.weights / self.scale
            bias = self.bias - weights @ self.shift
        return DocumentHead(
            weights=weights.tolist(), bias=bias.tolist(), query=self.query.detach().tolist(), reads=reads
        )


@dataclass(frozen=True)
class Trained:
    head: DocumentHead
    loss: float  # the kept epoch's mean training loss
    epochs: int
    steps: int
    weight_decay: float  # the decay kept
    best_epoch: int  # the epoch kept: the lowest validation loss
    validation_loss: dict[str, float]  # per decay tried, its lowest validation loss


def train_head(
    train: Part, validation: Part, settings: HeadSettings, on_epoch: Callable[[int, int, float, float], None]
) -> Trained:
    """The head fitted on `train`, its decay and epoch chosen on `validation`; `on_epoch(epoch,
    epochs, loss, validation accuracy)` after each epoch. On one thread: steps this small only
    lose to the threads' hand-offs, the more so on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs = [_train(train, validation, settings, decay, on_epoch) for decay in settings.weight_decays]
    finally:
        torch.set_num_threads(threads)
    losses = {f"{decay:g}": run[1] for decay, run in zip(settings.weight_decays, runs, strict=True)}
    kept = min(runs, key=lambda run: run[1])[0]
    return replace(kept, validation_loss=losses)


def _standardising(part: Part) -> tuple[np.ndarray, np.ndarray]:
    """Per input, the training windows' mean and spread (vectors only; logits stay as they are)."""
    x = part.inputs()[part.mask]
    shift, scale = x.mean(axis=0), x.std(axis=0) + 1e-6
    if part.vectors is None:
        return np.zeros_like(shift), np.ones_like(scale)
    classes = part.logits.shape[2]
    shift[-classes:], scale[-classes:] = 0.0, 1.0
    return shift.astype(np.float32), scale.astype(np.float32)


def _train(
    train: Part,
    validation: Part,
    settings: HeadSettings,
    decay: float,
    on_epoch: Callable[[int, int, float, float], None],
) -> tuple[Trained, float]:
    torch.manual_seed(settings.seed)
    inputs = train.inputs()
    net = HeadNet(inputs.shape[2], settings.hidden, settings.seed, *_standardising(train))
    optimizer = torch.optim.AdamW(net.parameters(), lr=settings.lr, weight_decay=decay)
    x, z, m, y = (torch.from_numpy(a) for a in (inputs, train.logits, train.mask, train.labels))
    vx, vz, vm, vy = (
        torch.from_numpy(a)
        for a in (validation.inputs(), validation.logits, validation.mask, validation.labels)
    )
    per_epoch = math.ceil(len(train) / settings.batch_size)
    total = settings.steps if settings.steps > 0 else settings.epochs * per_epoch
    epochs = math.ceil(total / per_epoch)
    rng = np.random.default_rng(settings.seed)
    reads: HeadInput = "logits" if train.vectors is None else "vectors"
    step, best, kept = 0, math.inf, net.head(reads)
    best_epoch, kept_loss = 0, 0.0
    for epoch in range(1, epochs + 1):
        order = torch.from_numpy(rng.permutation(len(train)))
        loss_sum, seen = 0.0, 0
        for start in range(0, len(train), settings.batch_size):
            if step == total:
                break
            batch = order[start : start + settings.batch_size]
            loss = nn.functional.cross_entropy(net(x[batch], z[batch], m[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            step, loss_sum, seen = step + 1, loss_sum + loss.item() * len(batch), seen + len(batch)
        with torch.no_grad():
            out = net(vx, vz, vm)
            valid_loss = float(nn.functional.cross_entropy(out, vy))
            accuracy = float((out.argmax(dim=1) == vy).float().mean())
        if valid_loss < best:  # early stop, in effect: the epoch of the lowest validation loss
            best, kept, best_epoch, kept_loss = (
                valid_loss,
                net.head(reads),
                epoch,
                loss_sum / max(seen, 1),
            )
        on_epoch(epoch, epochs, loss_sum / max(seen, 1), accuracy)
    log.info("weight decay %g: lowest validation loss %.4f at epoch %d", decay, best, best_epoch)
    return Trained(kept, kept_loss, epochs, step, decay, best_epoch, {}), best


def policy_with(
    base: LongTexts, combine: str, head: DocumentHead, chosen: dict[str, float] | None = None
) -> LongTexts:
    """`base`'s windows combined by `combine` (the head only where it is "head"), with the
    validation figures the choice was made on."""
    values = base.model_dump(exclude={"combine", "head", "chosen"})
    picked = head if combine == "head" else None
    return LongTexts.model_validate({**values, "combine": combine, "head": picked, "chosen": chosen})


def figures(
    part: Part, base: LongTexts, head: DocumentHead, scoring: Scoring, temperature: float
) -> dict[str, float]:
    """Accuracy of truncate and of every combination on `part`, with its texts and windows."""
    policies = {combine: policy_with(base, combine, head) for combine in COMBINES}
    right = dict.fromkeys([TRUNCATE, *COMBINES], 0)
    for i in range(len(part)):
        (logits, vectors), label = part.text(i), int(part.labels[i])
        right[TRUNCATE] += int(logits[0].argmax() == label)
        for combine, policy in policies.items():
            folded = combined(logits, policy, scoring, temperature, vectors)
            right[combine] += int(folded.argmax() == label)
    out = {name: count / len(part) for name, count in right.items()}
    return {**out, "texts": float(len(part)), "windows": float(part.windows)}


def best(accuracy: dict[str, float]) -> str:
    """The combination of the best accuracy; a tie goes to the simpler (mean, then max, then head)."""
    return max(COMBINES, key=lambda combine: (accuracy[combine], -COMBINES.index(combine)))
