"""V2 tensors to the engine's inputs, and the engine's outputs back to V2 tensors: the
model's tensor contract (schema.py) applied to one inference request."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attnserve.service.api.v2 import schema
from attnserve.service.api.v2.schema import (
    ATTENTION,
    ATTENTION_MASK,
    ATTENTION_MODE,
    INPUT_DECLS,
    INPUT_IDS,
    LABEL,
    LENGTHS,
    LOGITS,
    PROBABILITIES,
)
from attnserve.service.api.v2.tensors import bytes_output, decode_int64, format_shape, numeric_output, require
from attnserve.service.api.v2.types import InferRequest, InputTensor, OutputTensor, RequestedOutput
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.models.tokenization import EncodedTexts
from attnserve.service.engine.request.attention import SUPPORTED, AttentionMode
from attnserve.service.engine.request.classify import Outputs
from attnserve.service.errors import InvalidArgument


class Contract:
    """What a model version's replies need, prepared once per version."""

    __slots__ = ("declared", "labels")

    def __init__(self, model: LoadedModel) -> None:
        self.declared = [decl.name for decl in schema.outputs_of(model)]
        self.labels = tuple(label.encode() for label in model.labels)


def inputs_by_name(tensors: Sequence[InputTensor]) -> dict[str, InputTensor]:
    by_name: dict[str, InputTensor] = {}
    unknown = None
    for tensor in tensors:
        name = tensor.name
        if name in by_name:
            raise InvalidArgument(f"input {name[:64]}: given more than once")
        by_name[name] = tensor
        if name not in INPUT_DECLS and (unknown is None or name < unknown):
            unknown = name
    if unknown is not None:
        raise InvalidArgument(
            f"input {unknown[:64]}: not an input of this model (TEXT, or INPUT_IDS + ATTENTION_MASK)"
        )
    return by_name


def output(name: str, contract: Contract, out: Outputs) -> OutputTensor:
    """One requested output of a finished call."""
    if name == LOGITS:
        return numeric_output(LOGITS, "FP32", out.logits)
    if name == PROBABILITIES:
        return numeric_output(PROBABILITIES, "FP32", out.probabilities)
    if name == LABEL:
        labels = contract.labels
        return bytes_output(LABEL, (len(out), 1), [labels[i] for i in out.label_ids.tolist()])
    if name == ATTENTION:
        if out.attention is None:
            raise RuntimeError("the batch returned no attention although it was requested")
        return numeric_output(ATTENTION, "FP32", pad_attention(out.attention, out.encoded.lengths))
    return numeric_output(LENGTHS, "INT64", np.asarray(out.encoded.lengths, dtype=np.int64))


def requested_outputs(outputs: Sequence[RequestedOutput], declared: list[str]) -> list[str]:
    """Output names in the order the reply carries them: as requested, or all declared."""
    if not outputs:
        return declared
    wanted: list[str] = []
    for output in outputs:
        if output.name not in declared:
            raise InvalidArgument(
                f"output {output.name[:64]}: not an output of this model ({', '.join(declared)})"
            )
        if output.name in wanted:
            raise InvalidArgument(f"output {output.name}: requested more than once")
        if output.classification:
            raise InvalidArgument(
                f"output {output.name}: the classification parameter is not supported; read LABEL instead"
            )
        wanted.append(output.name)
    return wanted


def attention_mode(request: InferRequest, wanted: list[str], model: LoadedModel) -> AttentionMode:
    """The mode the request's ATTENTION output is extracted in (NONE when not asked for): its
    attention_mode parameter, from the output or the request, else POOLED."""
    given = request.attention_mode
    for requested in request.outputs:
        mode = requested.attention_mode
        if mode is None:
            continue
        if requested.name != ATTENTION:
            raise InvalidArgument(
                f"output {requested.name[:64]}: parameters.{ATTENTION_MODE} applies to {ATTENTION} only"
            )
        if given is not None and given != mode:
            raise InvalidArgument(
                f"output {ATTENTION}: parameters.{ATTENTION_MODE} {schema.mode_name(mode)!r} differs from "
                f"the request's {schema.mode_name(given)!r}; give one of them"
            )
        given = mode
    if ATTENTION not in wanted:
        if given is not None:
            missing = (
                f"model {model.name!r} has no attention weights"
                if model.attention_kind == "none"
                else "the request does not ask for it"
            )
            raise InvalidArgument(
                f"parameters.{ATTENTION_MODE}: picks the mode of the {ATTENTION} output, and {missing}"
            )
        return AttentionMode.NONE
    mode = AttentionMode.POOLED if given is None else given
    supported = SUPPORTED[model.attention_kind]
    if mode not in supported:
        # attention.check_request's rule, worded with this protocol's names
        allowed = ", ".join(schema.mode_name(m) for m in supported)
        raise InvalidArgument(
            f"output {ATTENTION}: {ATTENTION_MODE} {schema.mode_name(mode)!r} is not available for model "
            f"{model.name!r} (attention kind {model.attention_kind!r}); use one of: {allowed}"
        )
    return mode


def decode_ids(tensors: dict[str, InputTensor]) -> EncodedTexts:
    """INPUT_IDS + ATTENTION_MASK as unpadded rows (the mask must be right padding)."""
    for name in (INPUT_IDS, ATTENTION_MASK):
        if name not in tensors:
            raise InvalidArgument(f"input {name}: missing (give TEXT, or INPUT_IDS with ATTENTION_MASK)")
        require(tensors[name], INPUT_DECLS[name].datatype, INPUT_DECLS[name].shape)
    ids_tensor, mask_tensor = tensors[INPUT_IDS], tensors[ATTENTION_MASK]
    if mask_tensor.shape != ids_tensor.shape:
        raise InvalidArgument(
            f"input {ATTENTION_MASK}: shape {format_shape(mask_tensor.shape)} differs from "
            f"{INPUT_IDS}'s {format_shape(ids_tensor.shape)}"
        )
    ids, mask = decode_int64(ids_tensor), decode_int64(mask_tensor)  # [B, T] each
    lengths = mask.sum(axis=1)  # [B]
    prefix = np.arange(mask.shape[1]) < lengths[:, None]  # [B, T]
    if not np.array_equal(mask, prefix):
        raise InvalidArgument(
            f"input {ATTENTION_MASK}: each row must be 1 on the text's tokens, then 0 on the padding"
        )
    return EncodedTexts.from_ids([ids[i, :n] for i, n in enumerate(lengths.tolist())])


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
