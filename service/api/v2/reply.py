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
    """The requested outputs of a finished call, in `wanted`'s order."""
    return [_output(name, contract, out) for name in wanted]


def _output(name: str, contract: Contract, out: Outputs) -> OutputTensor:
    texts = len(out.label_ids)
    if name == LOGITS:
        return numeric_output(LOGITS, "FP32", out.logits)
    if name == PROBABILITIES:
        return numeric_output(PROBABILITIES, "FP32", out.probabilities)
    if name == LABEL:
        ids, labels, framed = out.label_ids.tolist(), contract.labels, contract.framed_labels
        items = [labels[i] for i in ids]
        return OutputTensor(LABEL, "BYTES", (texts, 1), items=items, raw=b"".join([framed[i] for i in ids]))
    if name == ATTENTION:
        if out.attention is None:
            raise RuntimeError("the batch returned no attention although it was requested")
        return numeric_output(ATTENTION, "FP32", pad_attention(out.attention, out.encoded.lengths))
    if name == ASSIGNED:
        assigned = contract.scoring.assigned(out.probabilities)
        if assigned is None:
            raise RuntimeError("ASSIGNED is declared for multi-label models only")
        return numeric_output(ASSIGNED, "BOOL", assigned)
    if name == VALUE:
        return numeric_output(VALUE, "FP32", out.probabilities)  # a regression's scores are its value
    if name == ATTRIBUTION:
        return numeric_output(ATTRIBUTION, "FP32", _attribution(out.attribution, texts))
    if name == ATTRIBUTION_ROWS:
        rows_taken = out.attribution_rows or [0] * texts
        return numeric_output(ATTRIBUTION_ROWS, "INT32", np.asarray(rows_taken, dtype=np.int32))
    if name == WINDOWS:
        return numeric_output(WINDOWS, "FP32", window_table(out, texts))
    if name == ANSWERED_BY:
        members = [member.encode() for member in out.answered_by or ()]
        return bytes_output(ANSWERED_BY, (texts, 1), members)
    return numeric_output("LENGTHS", "INT64", np.asarray(out.encoded.lengths, dtype=np.int64))


def numeric_output(name: str, datatype: str, array: np.ndarray) -> OutputTensor:
    data = np.ascontiguousarray(array, dtype=NUMERIC_DTYPES[datatype])
    return OutputTensor(name, datatype, data.shape, array=data)


def bytes_output(name: str, shape: tuple[int, ...], items: Sequence[bytes]) -> OutputTensor:
    return OutputTensor(name, "BYTES", shape, items=items, raw=encode_bytes(items))


def pad_attention(rows: list[np.ndarray], lengths: list[int]) -> np.ndarray:
    """Per-text attention padded with zeros on its token axes to the request's longest text:
    [n] -> [B, T]; [..., n, n] (pooled, rollout, last_layer, all) -> [B, ..., T, T]."""
    if len(rows) == 1:  # one text: nothing to pad
        return rows[0][None]
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
