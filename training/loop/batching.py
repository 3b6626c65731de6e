"""Encoded splits and the batches the trainer draws from them.

Padding is what a CPU spends most on: self-attention is quadratic in a batch's padded width
and every other layer linear in it. So training batches group rows of similar length, each
batch padded only to its own longest row, and the order of the batches stays random.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from attnserve.training.data import word_dropout

# Rows are sorted by length within pools of this many batches: enough for neighbours of
# similar length, few enough that a batch still mixes rows from all over the data set.
POOL_BATCHES = 50

Augment = Callable[[np.ndarray, np.ndarray], np.ndarray]


def word_dropout_augment(
    p: float, unk_id: int, rng: np.random.Generator, keep_ids: set[int]
) -> Augment | None:
    """Replace each real token but ``keep_ids`` by ``unk_id`` with probability p (None when p is 0)."""
    if p <= 0:
        return None

    def augment(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return word_dropout(ids, mask, p, unk_id, rng, keep_ids=keep_ids)

    return augment


@dataclass(frozen=True)
class Split:
    """One encoded split, in numpy.

    input_ids [N, W] right-padded (W is at least the longest row, usually max_len), lengths
    [N] real tokens per row, labels [N] class ids (or, multi-label, [N, C] 0/1 float32: the
    loss is then binary cross-entropy per label), optional groups [N]: rows sharing a group
    (car-order's sentence pairs) are kept next to each other, and so in the same training
    batch. Optional soft [N, C]: a teacher's logits per row (distillation); a row without a
    gold label has label -100 (ignored by cross_entropy) and learns from them alone.
    """

    input_ids: np.ndarray
    lengths: np.ndarray
    labels: np.ndarray
    groups: np.ndarray | None = None
    soft: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = self.input_ids.shape[0]
        if self.input_ids.ndim != 2 or self.lengths.shape != (n,) or self.labels.shape[:1] != (n,):
            raise ValueError(
                f"a split needs ids [N, W], lengths [N] and labels [N] or [N, C]; got "
                f"{self.input_ids.shape}, {self.lengths.shape} and {self.labels.shape}"
            )
        if self.groups is not None and self.groups.shape != (n,):
            raise ValueError(f"groups must be [N={n}], got {self.groups.shape}")
        if self.soft is not None and (self.soft.ndim != 2 or self.soft.shape[0] != n):
            raise ValueError(f"soft targets must be [N={n}, C], got {self.soft.shape}")
        if n and int(self.lengths.max()) > self.input_ids.shape[1]:
            raise ValueError(f"a length exceeds the id matrix width {self.input_ids.shape[1]}")

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def multi_label(self) -> bool:
        """Whether ``labels`` is a [N, C] 0/1 matrix (a text may have any number of labels)."""
        return self.labels.ndim == 2


def training_batches(
    split: Split, batch_size: int, rng: np.random.Generator, *, by_length: bool
) -> list[np.ndarray]:
    """Row indices of one epoch's batches, shuffled with ``rng``.

    Groups are shuffled whole and keep their rows adjacent. For minimal pairs (same words,
    opposite labels) every order-blind feature's gradient then cancels inside the batch, so
    the weak word-order signal is not drowned by noise: measured on car-order, the loss
    leaves its ln(2) plateau several times sooner.
    """
    n = len(split)
    if split.groups is None:
        unit = np.arange(n)
        order = rng.permutation(n)
    else:
        _, unit = np.unique(split.groups, return_inverse=True)
        rank = rng.permutation(int(unit.max()) + 1)[unit]
        order = np.lexsort((rng.random(n), rank))
    if not by_length:
        return [order[i : i + batch_size] for i in range(0, n, batch_size)]
    # A group is as long as its longest row, so sorting by that keeps its rows together.
    unit_len = np.zeros(int(unit.max()) + 1 if n else 0, dtype=np.int64)
    np.maximum.at(unit_len, unit, split.lengths)
    units_in_order = np.cumsum(np.r_[True, unit[order][1:] != unit[order][:-1]]) - 1  # [N]
    rows_per_unit = n / max(len(unit_len), 1)
    units_per_pool = max(int(POOL_BATCHES * batch_size / rows_per_unit), 1)
    pool = units_in_order // units_per_pool  # [N]
    order = order[np.lexsort((unit_len[unit[order]], pool))]  # stable: ties keep their random order
    batches = [order[i : i + batch_size] for i in range(0, n, batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def capped_runs(widths: np.ndarray, max_rows: int, max_tokens: int) -> list[slice]:
    """Consecutive runs over rows of ascending ``widths``, each padded to its last (widest) row.

    A run holds at most ``max_rows`` rows and at most ``max_tokens`` padded tokens (0: no token
    limit); a row wider than ``max_tokens`` makes a run of its own.
    """
    runs, start, n = [], 0, len(widths)
    while start < n:
        stop = min(start + max_rows, n)
        while max_tokens > 0 and stop - start > 1 and (stop - start) * int(widths[stop - 1]) > max_tokens:
            stop -= 1
        runs.append(slice(start, stop))
        start = stop
    return runs


def scoring_batches(split: Split, batch_size: int, max_tokens: int = 0) -> list[np.ndarray]:
    """Row indices for evaluation: shortest rows first, so each batch pads little.

    A batch holds ``batch_size`` rows, fewer where they would pad to more than ``max_tokens``
    tokens (0: no limit), so long rows do not make one evaluation step hold many times the
    activations of a short one.
    """
    order = np.argsort(split.lengths, kind="stable")
    widths = np.maximum(split.lengths[order], 1)
    return [order[run] for run in capped_runs(widths, batch_size, max_tokens)]


def batch_tensors(
    split: Split,
    idx: np.ndarray,
    device: torch.device,
    *,
    pad_to: int | None = None,
    augment: Augment | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """int64 ids [B, T], mask [B, T] and labels for rows ``idx``: int64 [B], or float32 [B, C]
    for a multi-label split (what BCEWithLogitsLoss reads).

    T is the longest of these rows, or ``pad_to`` (every batch as wide as max_len: the
    behaviour before length-aware batching, kept so it can be measured).
    """
    lengths = split.lengths[idx]  # [B]
    width = pad_to if pad_to is not None else max(int(lengths.max()), 1)
    ids = split.input_ids[idx, :width].astype(np.int64)  # [B, T]
    if ids.shape[1] < width:  # the matrix is narrower than pad_to: pad the rest
        ids = np.pad(ids, ((0, 0), (0, width - ids.shape[1])))
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)  # [B, T]
    if augment is not None:
        ids = augment(ids, mask)
    labels = split.labels[idx].astype(np.float32 if split.multi_label else np.int64)
    return (
        torch.from_numpy(ids).to(device),
        torch.from_numpy(mask).to(device),
        torch.from_numpy(labels).to(device),
    )


def soft_targets(split: Split, idx: np.ndarray, device: torch.device) -> torch.Tensor | None:
    """The teacher's float32 logits [B, C] for rows ``idx``, or None when the split has none."""
    if split.soft is None:
        return None
    return torch.from_numpy(np.ascontiguousarray(split.soft[idx], dtype=np.float32)).to(device)
