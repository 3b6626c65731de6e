"""The document head, trained in PyTorch on cached window logits, and every combination's figures.

Window w of a text scores s_w = query · tanh(weights @ z_w + bias) from its logits z_w [C];
a = softmax(s) over the text's windows; the text's logits are Σ a_w z_w, trained with
cross-entropy against the text's label. The query starts at zero, so the head starts as the
mean of the windows and learns from there. A few dozen parameters: seconds on a CPU.

Figures are read with the server's own fold (service/engine/request/windows.py `combined`:
mean, max and the head's `DocumentHead.scores` in numpy), so what training reports is what a
server answers; truncate is the first window alone (a text cut at its head when the window
is the model's max_len).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from attnserve.service.bundle import COMBINES, DocumentHead, LongTexts, Scoring
from attnserve.service.engine.request.windows import combined

log = logging.getLogger(__name__)
TRUNCATE = "truncate"


@dataclass(frozen=True)
class Part:
    """Some texts as their windows' logits, padded: [N, W, C] and the windows' mask [N, W]."""

    logits: np.ndarray
    mask: np.ndarray
    labels: np.ndarray  # [N]

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def windows(self) -> int:
        return int(self.mask.sum())

    def text(self, i: int) -> np.ndarray:
        return np.asarray(self.logits[i, : int(self.mask[i].sum())])


def make_part(logits: np.ndarray, counts: np.ndarray, picked: np.ndarray, labels: np.ndarray) -> Part:
    """The texts `picked` (indexes into `counts`) of window logits [R, C] laid out text after text."""
    starts = np.concatenate([[0], np.cumsum(counts)])
    widest = int(counts[picked].max()) if len(picked) else 1
    out = np.zeros((len(picked), widest, logits.shape[1]), np.float32)
    mask = np.zeros((len(picked), widest), bool)
    for row, i in enumerate(picked):
        count = int(counts[i])
        out[row, :count] = logits[starts[i] : starts[i] + count]
        mask[row, :count] = True
    return Part(out, mask, np.asarray(labels, np.int64))


@dataclass(frozen=True)
class HeadSettings:
    hidden: int = 8
    epochs: int = 20
    steps: int = 0  # optimisation steps in all (0: --epochs decides)
    batch_size: int = 64
    lr: float = 0.01
    seed: int = 0


class HeadNet(nn.Module):
    def __init__(self, classes: int, hidden: int, seed: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.weights = nn.Parameter(torch.randn(hidden, classes, generator=generator) / math.sqrt(classes))
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.query = nn.Parameter(torch.zeros(hidden))  # zero: every window weighs the same at first

    def forward(self, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[B, C] the texts' logits from their windows' [B, W, C] (mask [B, W])."""
        scores = torch.tanh(logits @ self.weights.T + self.bias) @ self.query  # [B, W]
        attention = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=1)
        return (attention.unsqueeze(-1) * logits).sum(dim=1)

    def head(self) -> DocumentHead:
        return DocumentHead(
            weights=self.weights.detach().tolist(),
            bias=self.bias.detach().tolist(),
            query=self.query.detach().tolist(),
        )


@dataclass(frozen=True)
class Trained:
    head: DocumentHead
    loss: float  # the last epoch's mean training loss
    epochs: int
    steps: int


def train_head(
    train: Part, validation: Part, settings: HeadSettings, on_epoch: Callable[[int, int, float, float], None]
) -> Trained:
    """The head fitted on `train`; `on_epoch(epoch, epochs, loss, validation accuracy)` after each
    epoch. On one thread: steps this small only lose to the threads' hand-offs, the more so on a
    busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(train, validation, settings, on_epoch)
    finally:
        torch.set_num_threads(threads)


def _train(
    train: Part, validation: Part, settings: HeadSettings, on_epoch: Callable[[int, int, float, float], None]
) -> Trained:
    torch.manual_seed(settings.seed)
    net = HeadNet(train.logits.shape[2], settings.hidden, settings.seed)
    optimizer = torch.optim.Adam(net.parameters(), lr=settings.lr)
    x, m, y = (torch.from_numpy(a) for a in (train.logits, train.mask, train.labels))
    vx, vm, vy = (torch.from_numpy(a) for a in (validation.logits, validation.mask, validation.labels))
    per_epoch = math.ceil(len(train) / settings.batch_size)
    total = settings.steps if settings.steps > 0 else settings.epochs * per_epoch
    epochs = math.ceil(total / per_epoch)
    rng = np.random.default_rng(settings.seed)
    step, loss_sum, seen = 0, 0.0, 0
    for epoch in range(1, epochs + 1):
        order = torch.from_numpy(rng.permutation(len(train)))
        loss_sum, seen = 0.0, 0
        for start in range(0, len(train), settings.batch_size):
            if step == total:
                break
            batch = order[start : start + settings.batch_size]
            loss = nn.functional.cross_entropy(net(x[batch], m[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            step, loss_sum, seen = step + 1, loss_sum + loss.item() * len(batch), seen + len(batch)
        with torch.no_grad():
            accuracy = float((net(vx, vm).argmax(dim=1) == vy).float().mean())
        on_epoch(epoch, epochs, loss_sum / max(seen, 1), accuracy)
    return Trained(net.head(), loss_sum / max(seen, 1), epochs, step)


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
        logits, label = part.text(i), int(part.labels[i])
        right[TRUNCATE] += int(logits[0].argmax() == label)
        for combine, policy in policies.items():
            right[combine] += int(combined(logits, policy, scoring, temperature).argmax() == label)
    out = {name: count / len(part) for name, count in right.items()}
    return {**out, "texts": float(len(part)), "windows": float(part.windows)}


def best(accuracy: dict[str, float]) -> str:
    """The combination of the best accuracy; a tie goes to the simpler (mean, then max, then head)."""
    return max(COMBINES, key=lambda combine: (accuracy[combine], -COMBINES.index(combine)))
