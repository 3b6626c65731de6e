"""The classify plane's request and reply types: plain frozen values, no wire format.

The native gRPC adapter (api/grpc/native.py) and the JSON API (api/http/classify.py) convert
their wire forms to these and back; the plane (plane.py) sees nothing else. The JSON API
writes them as they are, through pydantic: the annotations below say how a value reads in
JSON (attention modes by name, attention arrays as nested lists) and the OpenAPI document
is generated from the same types, so the document and the replies cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import ConfigDict, Field, PlainSerializer, PlainValidator, WithJsonSchema

from attnserve.service.engine.request.attention import AttentionMode
from attnserve.service.engine.request.attribution import Attribution

REPLY_CONFIG = ConfigDict(extra="forbid")  # the documented replies hold these fields only


def mode_name(mode: AttentionMode) -> str:
    """The attnserve.v1 enum name of a mode, as model descriptions spell it."""
    return f"ATTENTION_MODE_{mode.name}"


def _lower(mode: AttentionMode) -> str:
    return mode.name.lower()


# A mode as the JSON API's classify request and reply spell it ("pooled").
ModeWord = Annotated[
    AttentionMode,
    PlainSerializer(_lower, return_type=str),
    WithJsonSchema({"type": "string", "enum": [_lower(mode) for mode in AttentionMode]}),
]
# An attribution method as JSON spells it ("occlusion").
MethodWord = Annotated[
    Attribution,
    PlainSerializer(lambda method: method.word, return_type=str),
    WithJsonSchema({"type": "string", "enum": [method.word for method in Attribution]}),
]
# A mode as model descriptions spell it ("ATTENTION_MODE_POOLED").
ModeName = Annotated[
    AttentionMode,
    PlainSerializer(mode_name, return_type=str),
    WithJsonSchema(
        {"type": "string", "description": "attnserve.v1 AttentionMode names, e.g. ATTENTION_MODE_POOLED."}
    ),
]


def _nested(array: np.ndarray | None) -> Any:
    return None if array is None else array.tolist()


def _unchecked(value: Any) -> Any:
    return value  # replies are built from the engine's arrays, never parsed


# One text's attention in the requested mode (float32, padding stripped); JSON: nested lists.
AttentionArray = Annotated[
    np.ndarray | None,
    PlainValidator(_unchecked),
    PlainSerializer(_nested),
    WithJsonSchema({"description": "Nested lists in the requested mode; null when none."}),
]


@dataclass(frozen=True, slots=True)
class ClassifyRequest:
    model: str  # "" is the default model
    texts: Sequence[str]
    attention: AttentionMode = AttentionMode.NONE
    top_k: int = 0
    version: int = 0  # 0: the latest served
    request_id: str = ""
    attribution: Attribution = Attribution.NONE
    attribution_budget: int = 0  # shapley: forward rows per text; 0: the server's default


@dataclass(frozen=True, slots=True)
class TokenWeight:
    __pydantic_config__ = REPLY_CONFIG

    index: int
    token: str
    weight: float


@dataclass(frozen=True, slots=True)
class TextResult:
    __pydantic_config__ = REPLY_CONFIG

    label: str
    label_id: int
    probabilities: list[float]
    logits: list[float]
    tokens: Annotated[
        list[str],
        Field(
            description="The tokens the model saw, in order: word pieces and the tokenizer's added tokens "
            "([CLS], [SEP]), after normalisation and truncation."
        ),
    ]
    offsets: Annotated[
        list[tuple[int, int]],
        Field(
            description="Per token, its [start, end) character offsets in the request text (Unicode code "
            "points, as Python indexes a str): text[start:end] is what it was read from. Added tokens "
            "([CLS], [SEP]) have [0, 0]."
        ),
    ]
    special: Annotated[
        list[bool],
        Field(
            description="Per token, true where the tokenizer added it ([CLS], [SEP], ...) rather than read "
            "it from the text."
        ),
    ]
    truncated: bool
    attention: AttentionArray
    top_tokens: list[TokenWeight]
    answered_by: Annotated[
        str | None,
        Field(
            description='A cascade\'s member that answered this text: "student", or "teacher" when the '
            "student's top probability was under the cascade's threshold; null for any other model."
        ),
    ] = None
    attribution: Annotated[
        list[float] | None,
        Field(
            description="When an attribution was asked: one score per entry of `tokens`, how much the word "
            "the token belongs to moves the probability of `label` (occlusion: the drop when the word is "
            "removed; shapley: its Shapley value); 0 for special tokens. Null when none was asked."
        ),
    ] = None
    attribution_rows: Annotated[
        int | None,
        Field(description="The forward rows this text's attribution took (its cost); null when none asked."),
    ] = None


@dataclass(frozen=True, slots=True)
class Timings:
    __pydantic_config__ = REPLY_CONFIG

    tokenize_us: int
    queue_us: int
    inference_us: int
    total_us: int  # since the call arrived
    attribution_us: int = 0  # the attribution's rows, from their submission to their last batch


@dataclass(frozen=True, slots=True)
class ClassifyReply:
    __pydantic_config__ = REPLY_CONFIG

    model: str
    version: int
    labels: list[str]
    attention: ModeWord  # the mode asked for
    request_id: str
    results: list[TextResult]
    timings: Timings
    attribution: MethodWord = Attribution.NONE  # the method asked for


@dataclass(frozen=True, slots=True)
class AttentionInfo:
    __pydantic_config__ = REPLY_CONFIG

    kind: str  # "pool", "self", "layers" or "none"
    layers: int
    heads: int
    modes: list[ModeName]  # the modes the model answers
    shapes: Annotated[
        dict[ModeName, str],
        Field(description="Per mode, its shape per text; n stands for the text's tokens."),
    ]


@dataclass(frozen=True, slots=True)
class Limits:
    __pydantic_config__ = REPLY_CONFIG

    max_texts_per_request: int
    max_text_chars: int
    max_batch_size: int
    max_batch_tokens: int
    long_text: str


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """The onnxruntime intra-op threads a model version runs on, and where the number came from."""

    __pydantic_config__ = REPLY_CONFIG

    intra_op: Annotated[int, Field(description="Intra-op threads (0: onnxruntime's default, one per core).")]
    source: Annotated[
        Literal["server", "bundle", "measured"],
        Field(description="A server flag, the bundle's hint, or measured at load"),
    ]
    one_thread_ms: Annotated[float | None, Field(description="The measured batch at 1 thread")]
    all_cores_ms: Annotated[float | None, Field(description="The measured batch at `cores` threads")]
    cores: Annotated[int, Field(description="Cores the serving process may use, over its workers")]


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """A served model version, as every front end describes it."""

    __pydantic_config__ = REPLY_CONFIG

    name: str
    version: int
    versions: list[int]
    family: str
    labels: list[str]
    max_len: int
    attention: AttentionInfo
    limits: Limits
    provider: str
    threads: ThreadInfo
    label_graph: Annotated[
        str,
        Field(description='The graph that answers calls asking no attention: "int8" or "float32" '
              '(an encoder\'s label.onnx), or "" when model.onnx answers every call.'),
    ]  # fmt: skip
    metrics: dict[str, float]  # "<split>.<metric>" from training
    created_at: Annotated[str, Field(description="ISO 8601")]


@dataclass(frozen=True, slots=True)
class ModelList:
    __pydantic_config__ = REPLY_CONFIG

    models: list[ModelInfo]
