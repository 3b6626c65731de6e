"""A finished inference call's outputs as V2 tensors: the contract's one call on the way back.

Numeric outputs are contiguous little-endian arrays of their datatype; BYTES outputs carry
their elements and their raw data, framed here for whichever codec sends it raw (a label
was framed once, with its model's contract).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attnserve.service.api.v2.attribution import ATTRIBUTION, ATTRIBUTION_ROWS
from attnserve.service.api.v2.contract import (
    ANSWERED_BY,
    ASSIGNED,
    ATTENTION,
    LABEL,
    LENGTHS,
    LOGITS,
    PROBABILITIES,
    VALUE,
    WINDOWS,
    Contract,
)
from attnserve.service.api.v2.tensors import NUMERIC_DTYPES, encode_bytes
from attnserve.service.api.v2.types import OutputTensor
from attnserve.service.engine.request.results import Outputs


def outputs(wanted: Sequence[str], contract: Contract, out: Outputs) -> list[OutputTensor]:
    """The requested outputs of a finished call, in `wanted`'s order, picked in one loop."""
    texts = len(out.label_ids)
    tensors: list[OutputTensor] = []
    for name in wanted:
        if name == LABEL:  # the label's bytes and raw data, framed once per model version
            ids = out.label_ids.tolist()
            items = list(map(contract.labels.__getitem__, ids))
            raw = b"".join(map(contract.framed_labels.__getitem__, ids))
            tensors.append(OutputTensor(LABEL, "BYTES", (texts, 1), items=items, raw=raw))
            continue
        if name == ANSWERED_BY:
            tensors.append(bytes_output(ANSWERED_BY, (texts, 1), [m.encode() for m in out.answered_by or ()]))
            continue
        datatype = "FP32"
        if name == LOGITS:
            array = out.logits
        elif name in (PROBABILITIES, VALUE):  # a regression's scores are its value
            array = out.probabilities
        elif name == ATTENTION:
            rows = out.attention
            if rows is None:
                raise RuntimeError("the batch returned no attention although it was requested")
            array = rows[0][None] if len(rows) == 1 else pad_attention(rows, out.encoded.lengths)
        elif name == ASSIGNED:
            assigned = contract.scoring.assigned(out.probabilities)
            if assigned is None:
                raise RuntimeError("ASSIGNED is declared for multi-label models only")
            datatype, array = "BOOL", assigned
        elif name == ATTRIBUTION:
            array = _attribution(out.attribution, texts)
        elif name == ATTRIBUTION_ROWS:
            datatype, array = "INT32", np.asarray(out.attribution_rows or [0] * texts, dtype=np.int32)
        elif name == WINDOWS:
            array = window_table(out, texts)
        else:
            name, datatype, array = LENGTHS, "INT64", np.asarray(out.encoded.lengths, dtype=np.int64)
        tensors.append(numeric_output(name, datatype, array))
    return tensors


def numeric_output(name: str, datatype: str, array: np.ndarray) -> OutputTensor:
    data = np.ascontiguousarray(array, dtype=NUMERIC_DTYPES[datatype])
    return OutputTensor(name, datatype, data.shape, array=data)


def bytes_output(name: str, shape: tuple[int, ...], items: Sequence[bytes]) -> OutputTensor:
    return OutputTensor(name, "BYTES", shape, items=items, raw=encode_bytes(items))


def pad_attention(rows: list[np.ndarray], lengths: list[int]) -> np.ndarray:
    """Per-text attention padded with zeros on its token axes to the request's longest text:
    [n] -> [B, T]; [..., n, n] (pooled, rollout, last_layer, all) -> [B, ..., T, T]."""
    width = max(lengths)
    first = rows[0]
    if first.ndim == 1:
        vectors = np.zeros((len(rows), width), dtype=np.float32)  # [B, T]
        for i, (row, n) in enumerate(zip(rows, lengths, strict=True)):
            vectors[i, :n] = row
        return vectors
    # [B, T, T], [B, H, T, T] or [B, L, H, T, T]
    maps = np.zeros((len(rows), *first.shape[:-2], width, width), dtype=np.float32)
    for i, (row, n) in enumerate(zip(rows, lengths, strict=True)):
        maps[i, ..., :n, :n] = row
    return maps


def _attribution(rows: list[np.ndarray] | None, texts: int) -> np.ndarray:
    """[B, T] per token, zero padded to the longest text ([B, 0] when no method was asked)."""
    if rows is None:
        return np.zeros((texts, 0), dtype=np.float32)
    padded = np.zeros((len(rows), max(len(row) for row in rows)), dtype=np.float32)
    for i, row in enumerate(rows):
        padded[i, : len(row)] = row
    return padded


def window_table(out: Outputs, texts: int) -> np.ndarray:
    """[B, W, 3]: per text its windows' start and end characters and weight, zero-padded to
    the call's most windows ([B, 0, 3] when the call read no windows)."""
    windows = out.windows or []
    table = np.zeros((texts, max((len(w) for w in windows), default=0), 3), np.float32)
    for i, each in enumerate(windows):
        for j, window in enumerate(each):
            table[i, j] = (window.start, window.end, window.weight)
    return table
