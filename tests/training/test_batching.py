"""Length-grouped training batches, length-sorted scoring batches and the padded batch tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnserve.training.loop.batching import Split, batch_tensors, scoring_batches, training_batches

WIDTH = 32


def split(n: int, seed: int = 0, groups: bool = False) -> Split:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, WIDTH + 1, size=n)
    ids = rng.integers(3, 50, size=(n, WIDTH)).astype(np.int32)
    ids[np.arange(WIDTH)[None, :] >= lengths[:, None]] = 0
    if groups:  # pairs of rows of equal length, like car-order's minimal pairs
        lengths[1::2] = lengths[0::2]
    return Split(ids, lengths, rng.integers(0, 2, size=n), np.arange(n) // 2 if groups else None)


def padded_cells(data: Split, batches: list[np.ndarray]) -> int:
    return sum(len(b) * int(data.lengths[b].max()) for b in batches)


@pytest.mark.parametrize("by_length", [False, True])
def test_every_row_appears_once_per_epoch(by_length: bool) -> None:
    data = split(1000)
    batches = training_batches(data, 64, np.random.default_rng(0), by_length=by_length)
    rows = np.concatenate(batches)
    assert sorted(rows.tolist()) == list(range(1000))
    assert sorted(len(b) for b in batches) == [1000 % 64] + [64] * (1000 // 64)


def test_length_grouping_cuts_padding_and_keeps_the_order_random() -> None:
    data = split(20_000)
    grouped = training_batches(data, 64, np.random.default_rng(0), by_length=True)
    shuffled = training_batches(data, 64, np.random.default_rng(0), by_length=False)
    real = int(data.lengths.sum())
    assert padded_cells(data, grouped) < 1.1 * real < 0.6 * padded_cells(data, shuffled)
    # Batches are not visited shortest first: the mean length of consecutive batches varies both ways.
    means = np.array([data.lengths[b].mean() for b in grouped])
    assert (np.diff(means) > 0).mean() == pytest.approx(0.5, abs=0.1)
    again = training_batches(data, 64, np.random.default_rng(1), by_length=True)
    assert not all(np.array_equal(a, b) for a, b in zip(grouped, again, strict=False))


def test_groups_stay_adjacent_in_one_batch() -> None:
    data = split(2000, groups=True)
    assert data.groups is not None
    for by_length in (False, True):
        for batch in training_batches(data, 64, np.random.default_rng(3), by_length=by_length):
            assert len(batch) % 2 == 0
            pairs = data.groups[batch].reshape(-1, 2)
            assert (pairs[:, 0] == pairs[:, 1]).all(), "a pair was split"


def test_scoring_batches_go_shortest_first_and_cover_every_row() -> None:
    data = split(500)
    batches = scoring_batches(data, 64)
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    maxima = [int(data.lengths[b].max()) for b in batches]
    assert maxima == sorted(maxima)


def test_batch_tensors_pad_to_the_longest_row_or_to_max_len() -> None:
    data = split(50, seed=4)
    idx = np.array([3, 7, 11])
    ids, mask, labels = batch_tensors(data, idx, torch.device("cpu"))
    longest = int(data.lengths[idx].max())
    assert ids.shape == mask.shape == (3, longest) and ids.dtype == mask.dtype == torch.int64
    assert mask.sum(dim=1).tolist() == data.lengths[idx].tolist()
    assert torch.equal(ids, torch.from_numpy(data.input_ids[idx, :longest]).long())
    assert labels.tolist() == data.labels[idx].tolist()
    wide_ids, wide_mask, _ = batch_tensors(data, idx, torch.device("cpu"), pad_to=WIDTH + 8)
    assert wide_ids.shape == (3, WIDTH + 8)
    assert torch.equal(wide_ids[:, :longest], ids) and (wide_ids[:, longest:] == 0).all()
    assert torch.equal(wide_mask[:, :longest], mask) and (wide_mask[:, longest:] == 0).all()


def test_batch_tensors_apply_the_augmentation_to_real_tokens() -> None:
    data = split(10, seed=5)
    idx = np.arange(10)
    seen = []

    def mark(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        seen.append(mask.copy())
        return np.where(mask == 1, 1, ids)

    ids, mask, _ = batch_tensors(data, idx, torch.device("cpu"), augment=mark)
    assert (ids[mask == 1] == 1).all() and (ids[mask == 0] == 0).all()
    assert np.array_equal(seen[0], mask.numpy())


def test_a_split_checks_its_shapes() -> None:
    ids = np.zeros((4, 8), dtype=np.int32)
    with pytest.raises(ValueError, match="lengths"):
        Split(ids, np.ones(3, dtype=np.int64), np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match="exceeds the id matrix width 8"):
        Split(ids, np.full(4, 9), np.zeros(4, dtype=np.int64))
