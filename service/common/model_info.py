"""A served model version, as every front end describes it and the client reads it back:
one type, written by the native plane (api/native/plane.py), converted to attnserve.v1 and
JSON by the transports, and rebuilt from either by the client (service/client/messages.py),
which also reads it flatter (`attention_kind`, `attention_shapes`). The pydantic annotations
say how it reads in JSON; the OpenAPI document is generated from them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, PlainSerializer, WithJsonSchema

from attnserve.service.common.vocabulary import AttentionMode

REPLY_CONFIG = ConfigDict(extra="forbid")  # the documented replies hold these fields only

# A mode as model descriptions spell it ("ATTENTION_MODE_POOLED").
ModeName = Annotated[
    AttentionMode,
    PlainSerializer(lambda mode: mode.proto_name, return_type=str),
    WithJsonSchema(
        {"type": "string", "description": "attnserve.v1 AttentionMode names, e.g. ATTENTION_MODE_POOLED."}
    ),
]


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
class LimitsInfo:
    __pydantic_config__ = REPLY_CONFIG

    max_texts_per_request: int
    max_text_chars: int
    max_batch_size: int
    max_batch_tokens: int
    long_text: str


@dataclass(frozen=True, slots=True)
class WindowsInfo:
    """How a text over max_len is read with long_text "windows" (the bundle's policy or the
    server's default)."""

    __pydantic_config__ = REPLY_CONFIG

    window: int  # tokens per window, special tokens included
    stride: int  # tokens two neighbouring windows share
    combine: str  # "mean" or "max"
    max_windows: int  # the most windows of one text


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
    limits: LimitsInfo
    provider: str
    threads: ThreadInfo
    label_graph: Annotated[
        str,
        Field(description='The graph that answers calls asking no attention: "int8" or "float32" '
              '(an encoder\'s label.onnx), or "" when model.onnx answers every call.'),
    ]  # fmt: skip
    # "<split>.<metric>" from training; "calibration.temperature" (the served probabilities are
    # softmax(logits / temperature)), ".ece_before" and ".ece_after" where the bundle has one.
    metrics: dict[str, float]
    created_at: Annotated[str, Field(description="ISO 8601")]
    problem_type: Annotated[
        str,
        Field(description="What the scores mean, as transformers' problem_type: "
              '"single_label_classification" (a softmax over labels), "multi_label_classification" '
              '(a sigmoid per label, assigned at its threshold) or "regression" (one value).'),
    ] = "single_label_classification"  # fmt: skip
    thresholds: Annotated[
        list[float],
        Field(description="Multi-label models: per label, the probability at or over which it is assigned; "
              "empty for other models."),
    ] = dataclasses.field(default_factory=list)  # fmt: skip
    windows: WindowsInfo | None = None  # None: a client of a server that reports none

    # The flatter reading the client's users know: the attention's parts by name.
    @property
    def attention_kind(self) -> str:
        return self.attention.kind

    @property
    def attention_layers(self) -> int:
        return self.attention.layers

    @property
    def attention_heads(self) -> int:
        return self.attention.heads

    @property
    def attention_shapes(self) -> dict[str, str]:
        """Per mode's attnserve.v1 name, its shape per text."""
        return {mode.proto_name: shape for mode, shape in self.attention.shapes.items()}
