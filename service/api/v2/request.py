"""One V2 inference request read whole against its model's contract (contract.py): its
tensors and parameters checked and turned into the engine's `Inputs`, the outputs its reply
carries, and where an engine refusal of its texts is placed.

Runs once a call on the event loop: a request naming one TEXT input and no outputs (most
do) takes the short way, without matching inputs or outputs by name.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnserve.service.api.v2 import attribution
from attnserve.service.api.v2.contract import (
    ATTENTION,
    ATTENTION_MASK,
    ATTENTION_MODE,
    INPUT_DECLS,
    INPUT_IDS,
    TEXT,
    WINDOWS,
    Contract,
)
from attnserve.service.api.v2.tensors import decode_int64, format_shape, require, texts_of
from attnserve.service.api.v2.types import InferRequest, InputTensor, RequestedOutput
from attnserve.service.bundle import AttentionKind
from attnserve.service.common.vocabulary import AttentionMode, Attribution
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.models.tokenization import EncodedTexts
from attnserve.service.engine.request.attribution import NO_ATTRIBUTION
from attnserve.service.engine.request.classify import Inputs
from attnserve.service.errors import InvalidArgument
from attnserve.service.settings import LongText


@dataclass(frozen=True, slots=True)
class Asked:
    """A request read whole: the engine's call, the outputs its reply carries, and where an
    engine refusal of its texts is placed (the input they came in)."""

    inputs: Inputs
    wanted: list[str]
    input_name: str
    decode_seconds: float  # decoding INPUT_IDS + ATTENTION_MASK (compute_input's part before tokenizing)


def read(request: InferRequest, contract: Contract, model: LoadedModel, long_text: LongText) -> Asked:
    """`request` checked against the contract and read into the engine's inputs (`long_text`:
    the server's --long-text, for a request without its own)."""
    named = bool(request.outputs)
    wanted = requested_outputs(request.outputs, contract.declared) if named else contract.declared
    # The attention output is the bulk of a reply: the batch extracts it only when asked,
    # in the mode asked for (whether the model offers it is the engine's check).
    if named or request.attention_mode is not None:
        mode = attention_mode(request, wanted, model)
    else:  # ATTENTION, where declared, in its default mode
        mode = contract.attention
    windows = (request.long_text or long_text) == "windows"
    method = request.attribution
    if method is None or method == Attribution.NONE:
        explain = NO_ATTRIBUTION
        if not named:
            wanted = contract.windowed if windows else contract.plain
    else:
        explain = attribution.explain(request, wanted, named, model)
        if not named and not windows:
            wanted = [name for name in wanted if name != WINDOWS]
    given = request.inputs
    decode_seconds = 0.0
    if len(given) == 1 and given[0].name == TEXT:  # most requests: one TEXT input, nothing to match
        texts, encoded, input_name = texts_of(given[0], INPUT_DECLS[TEXT].shape), None, TEXT
    else:
        inputs = inputs_by_name(given)
        if TEXT in inputs:  # with another input: a single TEXT took the branch above
            raise InvalidArgument("input TEXT: give either TEXT or INPUT_IDS + ATTENTION_MASK, not both")
        decoding = time.perf_counter()
        texts, encoded, input_name = None, decode_ids(inputs), INPUT_IDS
        decode_seconds = time.perf_counter() - decoding
    asked = Inputs(texts, encoded, mode, explain=explain, long_text=request.long_text)
    return Asked(asked, wanted, input_name, decode_seconds)


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
                f"output {ATTENTION}: parameters.{ATTENTION_MODE} {mode.word!r} differs from "
                f"the request's {given.word!r}; give one of them"
            )
        given = mode
    if ATTENTION not in wanted:
        if given is not None:
            missing = (
                f"model {model.name!r} has no attention weights"
                if model.attention_kind == AttentionKind.NONE
                else "the request does not ask for it"
            )
            raise InvalidArgument(
                f"parameters.{ATTENTION_MODE}: picks the mode of the {ATTENTION} output, and {missing}"
            )
        return AttentionMode.NONE
    # Whether the model offers it is the engine's check, the same for every front end.
    return AttentionMode.POOLED if given is None else given


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
