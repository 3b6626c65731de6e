"""The native plane's request and reply types: plain frozen values, no wire format.

The native gRPC adapter (api/grpc/native.py) and the JSON API (api/http/native.py) convert
their wire forms to these and back; the plane (plane.py) sees nothing else. The JSON API
writes them as they are, through pydantic: the annotations below say how a value reads in
JSON (attention modes by name, attention arrays as nested lists) and the OpenAPI document
is generated from the same types, so the document and the replies cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from pydantic import Field, PlainSerializer, PlainValidator, WithJsonSchema

from attnserve.service.common.model_info import REPLY_CONFIG, ModelInfo
from attnserve.service.common.vocabulary import AttentionMode, Attribution
from attnserve.service.settings import LongText

# Each member's word, written into every reply with a look-up (no Python call per reply).
_MODE_WORDS = {mode: mode.word for mode in AttentionMode}
_METHOD_WORDS = {method: method.word for method in Attribution}

# A mode as the JSON API's classify request and reply spell it ("pooled"), read by the
# vocabulary's one reading of a word (its ValueError names the words; the API adds the field).
ModeWord = Annotated[
    AttentionMode,
    PlainValidator(AttentionMode.parse),
    PlainSerializer(_MODE_WORDS.get, return_type=str),
    WithJsonSchema({"type": "string", "enum": list(AttentionMode.words())}),
]
# An attribution method as JSON spells it ("occlusion").
MethodWord = Annotated[
    Attribution,
    PlainValidator(Attribution.parse),
    PlainSerializer(_METHOD_WORDS.get, return_type=str),
    WithJsonSchema({"type": "string", "enum": list(Attribution.words())}),
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
    attribution_label: str = ""  # the label explained, by name; "": each text's own label
    long_text: LongText | None = None  # a text over max_len: truncate, reject or windows; None: the server's


@dataclass(frozen=True, slots=True)
class TokenWeight:
    __pydantic_config__ = REPLY_CONFIG

    index: int
    token: str
    weight: float


@dataclass(frozen=True, slots=True)
class TextWindow:
    __pydantic_config__ = REPLY_CONFIG

    start: Annotated[int, Field(description="The first character of the text the window covers.")]
    end: Annotated[int, Field(description="One past its last character (Unicode code points).")]
    probabilities: Annotated[list[float], Field(description="The window's own scores, by label id.")]
    weight: Annotated[float, Field(description="Its weight in the text's answer; a text's weights sum to 1.")]
    attribution: Annotated[
        float | None,
        Field(description="With an occlusion attribution: the text's drop in the explained label's "
              "probability when this window is left out (the result's `attribution` holds the word level, "
              "inside the window whose drop is largest); null otherwise."),
    ] = None  # fmt: skip


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
            "the token belongs to moves the score of `label` (or of the request's `attribution_label`; "
            "occlusion: the drop when the word is "
            "removed; shapley: its Shapley value); 0 for special tokens. Null when none was asked."
        ),
    ] = None
    attribution_rows: Annotated[
        int | None,
        Field(description="The forward rows this text's attribution took (its cost); null when none asked."),
    ] = None
    assigned: Annotated[
        list[str] | None,
        Field(
            description="Multi-label models: the labels whose probability is at or over their threshold "
            "(the model's `thresholds`), in label order; possibly empty. Null for other models."
        ),
    ] = None
    windows: Annotated[
        list[TextWindow] | None,
        Field(
            description='With long_text "windows": the windows the text was read as (one where it fits), in '
            "order; with several, `attention` (pooled) and `top_tokens` cover the whole text's tokens. Null "
            "otherwise."
        ),
    ] = None
    value: Annotated[
        float | None,
        Field(description="Regression models: the predicted value (`probabilities` is then empty); null "
              "for classifiers."),
    ] = None  # fmt: skip


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
class ModelList:
    __pydantic_config__ = REPLY_CONFIG

    models: list[ModelInfo]
