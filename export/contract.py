"""The I/O contract of a bundle's graph, derived from the model it is exported from.

Inputs ``input_ids`` and ``attention_mask``: int64 ``[batch, sequence]``. Outputs ``logits``:
float32 ``[batch, classes]`` and, unless the family has none, ``attention``: float32 with
symbolic ``batch``/``sequence`` dims in the family's shape (pool ``[B, T]``, self
``[B, T, T]``, layers ``[B, L, H, T, T]``). Expressed as the manifest's own ``TensorSpec``s
so the same objects are checked against the graph here and written to bundle.json.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attnserve.export.errors import ExportError
from attnserve.service.bundle import AttentionKind, AttentionSpec, Dim, TensorSpec
from attnserve.training.models.base import Classifier

INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
LOGITS = "logits"
ATTENTION = "attention"
BATCH = "batch"
SEQUENCE = "sequence"

# Example sizes for tracing: both >= 2 and different from each other, because an exporter
# that specialises on a dim of 1, or confuses two equal dims, would bake them into the graph.
EXAMPLE_BATCH = 3
EXAMPLE_LENGTH = 7


@dataclass(frozen=True)
class GraphContract:
    """The inputs and outputs a bundle's graph must have, in manifest form."""

    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    attention: AttentionSpec


def vocab_size(model: Classifier) -> int:
    """The model's vocabulary size (every family's config has it, a checkpoint's included)."""
    size = getattr(model.config, "vocab_size", None)
    if size is None:
        raise ExportError(f"{model.family}: the model config names no vocab_size")
    return int(size)


def example_inputs(model: Classifier, max_len: int) -> tuple[Tensor, Tensor]:
    """Example ids/mask for tracing: real token ids, one row right-padded."""
    length = min(EXAMPLE_LENGTH, max_len)
    batch = EXAMPLE_BATCH if length != EXAMPLE_BATCH else EXAMPLE_BATCH + 1
    vocab = vocab_size(model)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, length), generator=generator, dtype=torch.int64)  # [B, T]
    mask = torch.ones(batch, length, dtype=torch.int64)  # [B, T]
    if length >= 2:
        mask[1, length // 2 :] = 0
    ids = ids.masked_fill(mask == 0, int(model.config.pad_id))  # [B, T]
    return ids, mask


def graph_contract(model: Classifier) -> GraphContract:
    """Declared I/O for ``model``; layer/head counts come from one eager forward pass."""
    kind: AttentionKind = _attention_kind(model)
    ids, mask = example_inputs(model, int(model.config.max_len))
    with torch.inference_mode():
        logits, attention = model(ids, mask)
    io = [
        TensorSpec(name=name, dtype="int64", shape=[BATCH, SEQUENCE]) for name in (INPUT_IDS, ATTENTION_MASK)
    ]
    outputs = [TensorSpec(name=LOGITS, dtype="float32", shape=[BATCH, int(logits.shape[1])])]
    if kind == AttentionKind.NONE:
        return GraphContract(
            inputs=io, outputs=outputs, attention=AttentionSpec(kind=kind, layers=0, heads=0)
        )
    if attention is None:
        raise ExportError(f"{model.family} declares attention kind {kind.value!r} but returned no attention")
    layers = heads = 0
    shape: list[Dim]
    if kind == AttentionKind.POOL:
        shape = [BATCH, SEQUENCE]
    elif kind == AttentionKind.SELF:
        shape = [BATCH, SEQUENCE, SEQUENCE]
    else:
        layers, heads = int(attention.shape[1]), int(attention.shape[2])
        shape = [BATCH, layers, heads, SEQUENCE, SEQUENCE]
    if attention.dim() != len(shape):
        raise ExportError(
            f"{model.family}: attention has rank {attention.dim()} {tuple(attention.shape)}, "
            f"kind {kind.value!r} needs rank {len(shape)}"
        )
    outputs.append(TensorSpec(name=ATTENTION, dtype="float32", shape=shape))
    spec = AttentionSpec(kind=kind, layers=layers, heads=heads)
    return GraphContract(inputs=io, outputs=outputs, attention=spec)


def _attention_kind(model: Classifier) -> AttentionKind:
    try:
        return AttentionKind(model.attention_kind)
    except ValueError:
        raise ExportError(f"{model.family}: unknown attention kind {model.attention_kind!r}") from None
