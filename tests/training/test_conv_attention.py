"""conv_attention and gru_attention: padding never changes a text's output, and their attention
is pooling weights over the real tokens."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from attnserve.training.models import ConvAttentionConfig, GRUAttentionConfig, build_model
from attnserve.training.models.gru_attention import reverse_in_place

SETTINGS: dict[str, dict[str, Any]] = {
    "conv-k1": {"kernel_size": 1, "conv_layers": 2},
    "conv-k3": {"kernel_size": 3, "conv_layers": 2},
    "conv-k5-no-bag": {"kernel_size": 5, "conv_layers": 1, "bag": False},
    "gru": {},
    "gru-no-bag": {"bag": False},
}


def _batch(lengths: list[int], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(width)
    ids = torch.randint(2, 40, (len(lengths), width), generator=g)  # [B, T]
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()  # [B, T]
    return ids * mask, mask


@pytest.mark.parametrize("case", SETTINGS)
def test_more_padding_leaves_logits_and_attention_unchanged(case: str) -> None:
    torch.manual_seed(0)
    family = "gru_attention" if case.startswith("gru") else "conv_attention"
    config = {"vocab_size": 40, "max_len": 24, "d_model": 16, "n_queries": 4, **SETTINGS[case]}
    model = build_model(family, config).eval()
    ids, mask = _batch([7, 3, 0], 7)
    wide_ids = torch.cat([ids, torch.zeros(3, 9, dtype=ids.dtype)], dim=1)  # the service pads batches
    wide_mask = torch.cat([mask, torch.zeros(3, 9, dtype=mask.dtype)], dim=1)
    with torch.no_grad():
        logits, attention = model(ids, mask)
        wide_logits, wide_attention = model(wide_ids, wide_mask)
        alone, _ = model(ids[1:2, :3], mask[1:2, :3])  # the short text in a batch of its own
    assert attention is not None and wide_attention is not None
    torch.testing.assert_close(wide_logits, logits, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(alone[0], logits[1], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(wide_attention[:, :7], attention, rtol=1e-5, atol=1e-6)
    assert float(wide_attention[:, 7:].abs().sum()) == 0.0 and float(attention[2].abs().sum()) == 0.0
    torch.testing.assert_close(attention[:2].sum(-1), torch.ones(2))  # pooling weights of real tokens
    assert not torch.isnan(logits).any()  # the fully padded row


def test_rows_reverse_in_place_and_back() -> None:
    x = torch.arange(1, 9, dtype=torch.float32).reshape(2, 4, 1)  # [B, T, 1]
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    flipped = reverse_in_place(x, mask)
    assert flipped.squeeze(-1).tolist() == [[3.0, 2.0, 1.0, 4.0], [6.0, 5.0, 7.0, 8.0]]
    torch.testing.assert_close(reverse_in_place(flipped, mask), x)


def test_configs_refuse_widths_the_queries_cannot_split() -> None:
    with pytest.raises(ValueError, match="divisible by n_queries"):
        ConvAttentionConfig(vocab_size=10, d_model=10, n_queries=4)
    with pytest.raises(ValueError, match="kernel_size must be odd"):
        ConvAttentionConfig(vocab_size=10, kernel_size=4)
    with pytest.raises(ValueError, match="d_model must be even"):
        GRUAttentionConfig(vocab_size=10, d_model=9, n_queries=1)
