"""The V2 tensor contract: how a served model looks on the V2 protocol (its tensors,
metadata and configuration). request.py reads one inference request whole against it (V2
tensors and parameters to the engine's inputs); reply.py turns the engine's outputs back.

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

from attnserve.service.api.v2 import attribution
from attnserve.service.api.v2.tensors import encode_bytes
from attnserve.service.api.v2.types import TensorDecl
from attnserve.service.bundle import AttentionKind
from attnserve.service.common.vocabulary import AttentionMode
from attnserve.service.edges import parse_word
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.errors import InvalidArgument

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

    __slots__ = ("attention", "declared", "framed_labels", "labels", "plain", "scoring", "windowed")

    def __init__(self, model: LoadedModel) -> None:
        self.declared = [decl.name for decl in outputs_of(model)]
        self.labels = tuple(label.encode() for label in model.labels)
        self.framed_labels = tuple(encode_bytes([label]) for label in self.labels)  # LABEL's raw data
        self.scoring = model.scoring
        # What a request naming no outputs and asking no attribution gets: every declared
        # output but the attribution's, and WINDOWS only where the texts are read as windows.
        self.windowed = [name for name in self.declared if name not in attribution.OUTPUTS]
        self.plain = [name for name in self.windowed if name != WINDOWS]
        # The ATTENTION output's mode for a request that names neither outputs nor a mode.
        self.attention = AttentionMode.POOLED if ATTENTION in self.declared else AttentionMode.NONE
