"""Initial weights: a small GPT-style default, and one that lets attention find word order.

Where the classes share their bags of words (car-order), every order-blind feature is
useless and the loss sits at ln(C) until attention starts to use positions. How long it
sits there is decided mostly by the initial weights, so the families with token-to-token
attention (transformer, self_attention) start from ``init_for_word_order``.
"""

from __future__ import annotations

import torch
from torch import nn

from attnserve.training.models.layers import PositionalEncoding, SelfAttention, sinusoids


def init_weights(module: nn.Module) -> None:
    """Small normal init for linear and embedding layers (GPT-2 style), zero biases."""
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


@torch.no_grad()
def init_for_word_order(
    model: nn.Module, embed: nn.Embedding, positions: PositionalEncoding, qk_gain: float
) -> None:
    """PyTorch's default Linear init, unit-scale word embeddings, learned positions that start
    from sinusoids, and query/key weights scaled by ``qk_gain``.

    Measured on car-order (default transformer, 2000 pairs, batch 64): with GPT-style 0.02
    init the loss never left ln(2) within the budget; with the default Linear init it left
    after 4 to 7 epochs, or not within 12 (2 of 6 data seeds). With query/key weights at twice
    the default scale, the initial attention differs enough between word orders that every
    seed left by epoch 3; held-out-pair accuracy went from mean 0.98, worst 0.94 (4 seeds, 40
    epochs) to mean 0.995, worst 0.98 (8 seeds, 25 epochs). self_attention went from chance
    (0.53) to 0.74.
    Sinusoids make position offsets linear maps of the table, so "the word before" is
    learnable from the first step.
    """
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.reset_parameters()
    nn.init.normal_(embed.weight, std=1.0)
    if positions.kind == "learned":
        positions.table.copy_(sinusoids(positions.table.shape[0], positions.table.shape[1]))
    for module in model.modules():
        if isinstance(module, SelfAttention):
            module.query.weight.mul_(qk_gain)
            module.key.weight.mul_(qk_gain)
