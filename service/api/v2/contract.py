"""The V2 tensor contract: how a served model looks on the V2 protocol (its tensors,
metadata and configuration), and one inference request read whole against it (`read`: V2
tensors and parameters to the engine's inputs; reply.py turns the engine's outputs back).

Every model has the same tensor contract (only the class count and the attention rank
vary), with a leading batch dimension of up to `max_texts_per_request` texts:

    inputs   TEXT            BYTES  [-1, 1]       tokenized by the server, or
             INPUT_IDS       INT64  [-1, -1]      ids from the bundle's tokenizer, right-padded,
             ATTENTION_MASK  INT64  [-1, -1]      1 on each text's tokens, 0 on padding
    outputs  LOGITS          FP32   [-1, C]
             PROBABILITIES   FP32   [-1, C]       classifiers: softmax, or a sigmoid per label
             LABEL           BYTES  [-1, 1]       classifiers: the top label
             ASSIGNED        BOOL   [-1, C]       multi-label models: each label at or over its threshold
             VALUE           FP32   [-1, 1]       regression models (one output): the value
             ATTENTION       FP32   [-1, -1] (kind pool) or [-1, -1, -1] (self and layers: the
                                    last layer averaged over heads), padded with zeros to the
                                    request's longest text; absent for models without attention
             LENGTHS         INT64  [-1]          tokens per text (the unpadded extent of ATTENTION)
             ANSWERED_BY     BYTES  [-1, 1]       cascades only: "student" or "teacher" per text
             WINDOWS         FP32   [-1, -1, 3]   per text its windows' start and end characters and
                                    weight, zero-padded; only with the `long_text` parameter (or
                                    the server's --long-text) "windows"
             ATTRIBUTION     FP32   [-1, -1]      per token, zero padded; with ATTRIBUTION_ROWS INT32
                                    [-1], only when asked for (attribution.py)

The declared ATTENTION shape is the default mode's. A request may pick another mode with the
`attention_mode` parameter (on the ATTENTION output, or on the request: tritonclient sets no
parameters per output); `last_layer` [B, H, T, T] and `all` [B, L, H, T, T] change the rank,
which the protocol's metadata cannot declare.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnserve.service.api.v2 import attribution
from attnserve.service.api.v2.tensors import decode_int64, encode_bytes, format_shape, require, texts_of
from attnserve.service.api.v2.types import InferRequest, InputTensor, RequestedOutput, TensorDecl
from attnserve.service.bundle import AttentionKind
from attnserve.service.common.vocabulary import AttentionMode, Attribution
from attnserve.service.edges import parse_word
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.models.tokenization import EncodedTexts
from attnserve.service.engine.request.attribution import NO_ATTRIBUTION
from attnserve.service.engine.request.classify import Inputs
from attnserve.service.errors import InvalidArgument
from attnserve.service.settings import LongText

TEXT, INPUT_IDS, ATTENTION_MASK = "TEXT", "INPUT_IDS", "ATTENTION_MASK"
LOGITS, PROBABILITIES, LABEL, ATTENTION, LENGTHS = "LOGITS", "PROBABILITIES", "LABEL", "ATTENTION", "LENGTHS"
ANSWERED_BY = "ANSWERED_BY"  # a cascade's only: the member that answered each text
ASSIGNED, VALUE = "ASSIGNED", "VALUE"  # multi-label and regression models (the bundle's scoring)
WINDOWS, LONG_TEXT = "WINDOWS", "long_text"  # texts read as windows: the output and the request's parameter

# The ATTENTION output's modes, by the name the `attention_mode` parameter gives (the JSON
# API's names); leaving ATTENTION out of the request is mode NONE.
ATTENTION_MODE = "attention_mode"


def parse_attention_mode(value: object, where: str) -> AttentionMode:
    """An `attention_mode` parameter's value (a string) as its mode, read as every front end
    reads a mode; "none" is leaving the ATTENTION output out, not a value of this parameter."""
    mode = parse_word(AttentionMode, value, field=where)
    if mode == AttentionMode.NONE:
        offered = ", ".join(member.word for member in AttentionMode if member != AttentionMode.NONE)
        raise InvalidArgument(
            f"{where}: for no attention leave the {ATTENTION} output out; or use one of: {offered}"
        )
    return mode


INPUTS = (
    TensorDecl(TEXT, "BYTES", (-1, 1)),
    TensorDecl(INPUT_IDS, "INT64", (-1, -1)),
    TensorDecl(ATTENTION_MASK, "INT64", (-1, -1)),
)
INPUT_DECLS = {decl.name: decl for decl in INPUTS}


def outputs_of(model: LoadedModel) -> tuple[TensorDecl, ...]:
    classes, scoring = len(model.labels), model.scoring
    declared = [TensorDecl(LOGITS, "FP32", (-1, classes))]
    if scoring.regression:  # one output, a value: no probabilities and no label to pick
        declared.append(TensorDecl(VALUE, "FP32", (-1, 1)))
    else:
        declared += [TensorDecl(PROBABILITIES, "FP32", (-1, classes)), TensorDecl(LABEL, "BYTES", (-1, 1))]
    if scoring.multi:
        declared.append(TensorDecl(ASSIGNED, "BOOL", (-1, classes)))
    if model.attention_kind == AttentionKind.POOL:
        declared.append(TensorDecl(ATTENTION, "FP32", (-1, -1)))
    elif model.attention_kind != AttentionKind.NONE:
        declared.append(TensorDecl(ATTENTION, "FP32", (-1, -1, -1)))
    declared.append(TensorDecl(LENGTHS, "INT64", (-1,)))
    declared.append(TensorDecl(WINDOWS, "FP32", (-1, -1, 3)))
    if model.cascade is not None:
        declared.append(TensorDecl(ANSWERED_BY, "BYTES", (-1, 1)))
    declared.extend(attribution.DECLS)
    return tuple(declared)


# --- one inference request ------------------------------------------------------------------
class Contract:
    """What a model version's requests and replies need, prepared once per version."""

    __slots__ = ("declared", "framed_labels", "labels", "plain", "scoring", "windowed")

    def __init__(self, model: LoadedModel) -> None:
        self.declared = [decl.name for decl in outputs_of(model)]
        self.labels = tuple(label.encode() for label in model.labels)
        self.framed_labels = tuple(encode_bytes([label]) for label in self.labels)  # LABEL's raw data
        self.scoring = model.scoring
        # What a request naming no outputs and asking no attribution gets: every declared
        # output but the attribution's, and WINDOWS only where the texts are read as windows.
        self.windowed = [name for name in self.declared if name not in attribution.OUTPUTS]
        self.plain = [name for name in self.windowed if name != WINDOWS]


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
    wanted = requested_outputs(request.outputs, contract.declared)
    # The attention output is the bulk of a reply: the batch extracts it only when asked,
    # in the mode asked for (whether the model offers it is the engine's check).
    mode = attention_mode(request, wanted, model)
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
    inputs = inputs_by_name(request.inputs)
    decode_seconds = 0.0
    if TEXT in inputs:
        if len(inputs) > 1:
            raise InvalidArgument("input TEXT: give either TEXT or INPUT_IDS + ATTENTION_MASK, not both")
        texts, encoded, input_name = texts_of(inputs[TEXT], INPUT_DECLS[TEXT].shape), None, TEXT
    else:
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
