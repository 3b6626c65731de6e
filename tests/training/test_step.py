"""A step split into micro-batches by tokens is the whole batch's step: same loss, same gradient."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

from attnserve.training.loop.batching import Split, batch_tensors, scoring_batches
from attnserve.training.loop.step import accumulate_gradients, micro_batches, train_step
from attnserve.training.loop.trainer import TrainConfig, predict
from attnserve.training.models import Classifier, build_model

WIDTH = 16
CPU = torch.device("cpu")


def _split(n: int, seed: int) -> Split:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, WIDTH + 1, size=n)
    lengths[0] = WIDTH  # one full-width row, so the batch is WIDTH wide
    ids = rng.integers(3, 40, size=(n, WIDTH)) * (np.arange(WIDTH)[None, :] < lengths[:, None])
    return Split(ids.astype(np.int32), lengths, rng.integers(0, 3, size=n))


def _model(family: str = "transformer") -> Classifier:
    torch.manual_seed(0)
    config: dict[str, object] = {"vocab_size": 40, "num_classes": 3, "max_len": WIDTH}
    if family != "transformer":
        config["dropout"] = 0.0  # dropout masks are drawn per micro-batch: compare without them
    return build_model(family, config).double().train()


def test_micro_batches_cover_every_row_once_within_the_token_limit() -> None:
    lengths = np.array([5, 16, 3, 9, 9, 1, 12, 7])
    assert [(list(r), w) for r, w in micro_batches(lengths, 16, 128, fixed_width=False)] == [
        (list(range(8)), 16)
    ]  # 8 x 16 tokens fit: one pass, as before
    parts = micro_batches(lengths, 16, 30, fixed_width=False)
    assert sorted(np.concatenate([rows for rows, _ in parts]).tolist()) == list(range(8))
    for rows, width in parts:
        assert width == lengths[rows].max()  # each padded to its own longest row
        assert len(rows) * width <= 30 or len(rows) == 1
    assert len(parts) == 4  # [1, 3, 5, 7], [9, 9, 12] is 36: cut at [9, 9], [12], [16]
    fixed = micro_batches(lengths, 16, 40, fixed_width=True)
    assert [len(rows) for rows, _ in fixed] == [2, 2, 2, 2] and {w for _, w in fixed} == {16}


@pytest.mark.parametrize(
    ("family", "settings"),
    [
        ("transformer", {}),
        ("transformer", {"fused_attention": False}),
        ("transformer", {"pad_to_max_len": True}),
        ("self_attention", {}),
    ],
)
@pytest.mark.parametrize("weighted", [False, True])
def test_split_batches_give_the_whole_batchs_loss_and_gradient(
    family: str, settings: dict[str, Any], weighted: bool
) -> None:
    split = _split(24, seed=1)
    batch = batch_tensors(split, np.arange(24), CPU, pad_to=WIDTH if settings.get("pad_to_max_len") else None)
    weights = torch.tensor([0.5, 1.0, 2.5], dtype=torch.float64) if weighted else None
    whole_cfg = replace(TrainConfig(), max_batch_tokens=0, **settings)
    split_cfg = replace(whole_cfg, max_batch_tokens=50)
    assert len(micro_batches(split.lengths, WIDTH, 50, fixed_width=False)) >= 6
    whole, parts = _model(family), _model(family)
    loss_whole, correct_whole = accumulate_gradients(whole, batch, whole_cfg, weights)
    loss_parts, correct_parts = accumulate_gradients(parts, batch, split_cfg, weights)
    assert loss_parts == pytest.approx(loss_whole, rel=1e-12)
    assert correct_parts == correct_whole
    for (name, a), b in zip(whole.named_parameters(), parts.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None, name
        assert torch.allclose(a.grad, b.grad, rtol=1e-9, atol=1e-13), name


def test_a_split_optimizer_step_lands_where_the_whole_one_does() -> None:
    split = _split(32, seed=2)
    batch = batch_tensors(split, np.arange(32), CPU)
    whole = _model()
    parts = copy.deepcopy(whole)
    for model, tokens in ((whole, 0), (parts, 40)):
        cfg = replace(TrainConfig(), max_batch_tokens=tokens)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for _ in range(3):
            train_step(model, opt, batch, cfg)
    for a, b in zip(whole.parameters(), parts.parameters(), strict=True):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-12)


def test_scoring_batches_keep_to_the_token_limit_and_score_the_same() -> None:
    split = _split(200, seed=3)
    batches = scoring_batches(split, 64, max_tokens=400)
    assert sorted(np.concatenate(batches).tolist()) == list(range(200))
    assert all(len(b) * split.lengths[b].max() <= 400 for b in batches)
    assert 64 * np.sort(split.lengths)[63] <= 400 and len(batches[0]) == 64  # short rows fill a batch
    full_width = [len(b) for b in batches if split.lengths[b].max() == WIDTH]
    assert max(full_width) == 400 // WIDTH  # the longest rows come 25 to a batch
    assert [len(b) for b in scoring_batches(split, 64)] == [64, 64, 64, 8]
    model = _model().eval()
    probs, loss = predict(model, split, CPU)
    capped_probs, capped_loss = predict(model, split, CPU, max_tokens=400)
    np.testing.assert_allclose(capped_probs, probs, rtol=1e-5, atol=1e-6)  # predict's output is float32
    assert capped_loss == pytest.approx(loss, rel=1e-9)
