"""One V2 inference request: decode the inputs, run the core, write the requested outputs."""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass

import numpy as np

from attnserve.service.api.v2.codec import (
    InputTensor,
    OutputWriter,
    collect_inputs,
    decode_bytes,
    decode_int64,
    format_shape,
)
from attnserve.service.api.v2.schema import (
    ATTENTION,
    ATTENTION_MASK,
    INPUT_IDS,
    INPUTS,
    LABEL,
    LENGTHS,
    LOGITS,
    PROBABILITIES,
    TEXT,
    outputs_of,
)
from attnserve.service.engine.attention import AttentionMode
from attnserve.service.engine.classify import Inputs
from attnserve.service.engine.core import Core
from attnserve.service.engine.model import LoadedModel
from attnserve.service.engine.tokenization import EncodedTexts
from attnserve.service.errors import InvalidArgument
from attnserve.service.grpc.calls import CallRecord
from attnserve.service.proto.inference import grpc_service_pb2 as pb

_SPECS = {decl.name: decl for decl in INPUTS}


@dataclass(slots=True)
class Timings:
    """A successful request's parts, in seconds (Triton's statistics split)."""

    queue: float
    compute_input: float
    compute_infer: float
    compute_output: float


async def infer(
    core: Core,
    model: LoadedModel,
    request: pb.ModelInferRequest,
    deadline: float | None,
    record: CallRecord,
    response: pb.ModelInferResponse,
) -> Timings:
    """Fill `response` for `request`; only the requested outputs are computed and sent."""
    wanted = requested_outputs(request, model)
    # The attention output is the bulk of a reply: the batch extracts it only when asked.
    mode = AttentionMode.POOLED if ATTENTION in wanted else AttentionMode.NONE
    inputs = collect_inputs(request)
    unknown = sorted(set(inputs) - set(_SPECS))
    if unknown:
        raise InvalidArgument(
            f"input {unknown[0][:64]}: not an input of this model (TEXT, or INPUT_IDS + ATTENTION_MASK)"
        )
    if TEXT in inputs:
        if len(inputs) > 1:
            raise InvalidArgument("input TEXT: give either TEXT or INPUT_IDS + ATTENTION_MASK, not both")
        tensor = inputs[TEXT]
        tensor.require(_SPECS[TEXT].datatype, _SPECS[TEXT].shape)
        texts = decode_bytes(tensor)
        record.texts = len(texts)
        given, request_input = Inputs(texts=texts, mode=mode, deadline=deadline), TEXT
        decode_seconds = 0.0
    else:
        decoding = time.perf_counter()
        encoded = decode_ids(inputs)
        record.texts = len(encoded)
        given, request_input = Inputs(encoded=encoded, mode=mode, deadline=deadline), INPUT_IDS
        decode_seconds = time.perf_counter() - decoding
    try:
        out = await core.classify(model, given)
    except InvalidArgument as exc:
        raise InvalidArgument(f"input {request_input}: {exc.message}") from None

    writing = time.perf_counter()
    response.model_name = model.name
    response.model_version = str(model.version)
    response.id = request.id
    writer = OutputWriter(response)
    lengths = out.encoded.lengths
    for name in wanted:
        if name == LOGITS:
            writer.numeric(LOGITS, "FP32", out.logits)
        elif name == PROBABILITIES:
            writer.numeric(PROBABILITIES, "FP32", out.probabilities)
        elif name == LABEL:
            names = model.label_bytes
            writer.bytes_tensor(LABEL, (len(out), 1), [names[i] for i in out.label_ids.tolist()])
        elif name == ATTENTION:
            if out.attention is None:
                raise RuntimeError("the batch returned no attention although it was requested")
            writer.numeric(ATTENTION, "FP32", pad_attention(out.attention, lengths))
        else:
            writer.numeric(LENGTHS, "INT64", np.asarray(lengths, dtype=np.int64))
    timings = out.timings
    return Timings(
        queue=timings.queue,
        compute_input=decode_seconds + timings.tokenize,
        compute_infer=timings.inference,
        compute_output=time.perf_counter() - writing,
    )


_DECLARED: weakref.WeakKeyDictionary[LoadedModel, list[str]] = weakref.WeakKeyDictionary()


def requested_outputs(request: pb.ModelInferRequest, model: LoadedModel) -> list[str]:
    """Output names in the order the reply carries them: as requested, or all declared."""
    declared = _DECLARED.get(model)
    if declared is None:  # prepared once per model version
        declared = _DECLARED[model] = [decl.name for decl in outputs_of(model)]
    if not request.outputs:
        return declared
    wanted: list[str] = []
    for output in request.outputs:
        if output.name not in declared:
            raise InvalidArgument(
                f"output {output.name[:64]}: not an output of this model ({', '.join(declared)})"
            )
        if output.name in wanted:
            raise InvalidArgument(f"output {output.name}: requested more than once")
        if "classification" in output.parameters:
            raise InvalidArgument(
                f"output {output.name}: the classification parameter is not supported; read LABEL instead"
            )
        wanted.append(output.name)
    return wanted


def decode_ids(tensors: dict[str, InputTensor]) -> EncodedTexts:
    """INPUT_IDS + ATTENTION_MASK as unpadded rows (the mask must be right padding)."""
    for name in (INPUT_IDS, ATTENTION_MASK):
        if name not in tensors:
            raise InvalidArgument(f"input {name}: missing (give TEXT, or INPUT_IDS with ATTENTION_MASK)")
        tensors[name].require(_SPECS[name].datatype, _SPECS[name].shape)
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
    """Per-text attention ([n] or [n, n]) padded with zeros to the request's longest text."""
    if len(rows) == 1:  # one text: nothing to pad
        return rows[0][None]
    width = max(lengths)
    if rows[0].ndim == 1:
        vectors = np.zeros((len(rows), width), dtype=np.float32)  # [B, T]
        for i, (row, n) in enumerate(zip(rows, lengths, strict=True)):
            vectors[i, :n] = row
        return vectors
    matrices = np.zeros((len(rows), width, width), dtype=np.float32)  # [B, T, T]
    for i, (row, n) in enumerate(zip(rows, lengths, strict=True)):
        matrices[i, :n, :n] = row
    return matrices
