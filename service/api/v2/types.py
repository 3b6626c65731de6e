"""The V2 plane's request and response types: plain values, no wire format.

The gRPC adapter (api/grpc/v2.py + v2_codec.py) and the REST adapter (api/http/v2.py +
v2_codec.py) convert their wire forms to these and back; the V2 plane (plane.py) sees nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from attnserve.service.common.vocabulary import AttentionMode, Attribution
from attnserve.service.settings import LongText


@dataclass(frozen=True, slots=True)
class TensorDecl:
    """A tensor of the model's contract (contract.py); -1 is a dimension of any size."""

    name: str
    datatype: str
    shape: tuple[int, ...]  # full shape, batch dimension first


@dataclass(frozen=True, slots=True)
class InputTensor:
    """One request input: its data either `raw` (row-major, little endian; a BYTES element is
    a 4-byte little-endian length then its bytes) or typed `values` (bytes per BYTES
    element, integers for INT64)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    raw: bytes | None = None
    values: Sequence[bytes] | Sequence[int] | None = None


@dataclass(frozen=True, slots=True)
class RequestedOutput:
    name: str
    classification: bool = False  # Triton's classification parameter (refused: read LABEL)
    attention_mode: AttentionMode | None = None  # its attention_mode parameter, when given


@dataclass(frozen=True, slots=True)
class InferRequest:
    model_name: str
    model_version: str  # as sent: "" for the latest
    id: str
    inputs: Sequence[InputTensor]
    outputs: Sequence[RequestedOutput] = ()  # empty: every output the model declares
    # The request's attention_mode parameter, for clients that cannot set one per output
    # (tritonclient); the ATTENTION output's own parameter, when given, must agree.
    attention_mode: AttentionMode | None = None
    # The request's attribution parameters (api/v2/attribution.py): None when not given.
    attribution: Attribution | None = None
    attribution_budget: int = 0
    attribution_label: str = ""
    long_text: LongText | None = None  # the `long_text` parameter; None: the server's --long-text


@dataclass(frozen=True, slots=True)
class OutputTensor:
    """One reply output: numeric data as an `array` of `datatype`, BYTES as `items` and as
    `raw` (the items framed as raw tensor data)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    array: np.ndarray | None = None  # contiguous, little endian
    items: Sequence[bytes] | None = None
    raw: bytes = b""


@dataclass(frozen=True, slots=True)
class InferResponse:
    model_name: str
    model_version: str
    id: str
    outputs: list[OutputTensor]


@dataclass(frozen=True, slots=True)
class ServerMetadata:
    name: str
    version: str
    extensions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    name: str
    versions: list[str]
    platform: str
    inputs: tuple[TensorDecl, ...]
    outputs: tuple[TensorDecl, ...]


@dataclass(frozen=True, slots=True)
class ConfigTensor:
    """A tensor as Triton's model configuration shows it: dims without the batch dimension;
    `reshape` present (to []) for a tensor of shape [-1] given as dims [1]."""

    name: str
    data_type: str  # TYPE_STRING, TYPE_INT64, TYPE_FP32
    dims: tuple[int, ...]
    optional: bool = False
    reshape: bool = False


@dataclass(frozen=True, slots=True)
class ModelConfig:
    name: str
    platform: str
    backend: str
    max_batch_size: int
    inputs: tuple[ConfigTensor, ...]
    outputs: tuple[ConfigTensor, ...]
    preferred_batch_size: int
    max_queue_delay_microseconds: int
    parameters: dict[str, str] = field(default_factory=dict)  # problem_type, thresholds


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.ns += int(seconds * 1e9)


@dataclass(slots=True)
class RequestStats:
    """Per-request durations of one model version's V2 inference requests (Triton's meaning:
    `success` is the whole time in the server; queue, compute_input (decoding and
    tokenizing), compute_infer (the batch that carried the request) and compute_output
    (building the reply) are its parts; failures count under `fail` only)."""

    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    last_inference_ms: int = 0

    DURATIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True, slots=True)
class ModelStats:
    name: str
    version: str
    last_inference: int
    inference_count: int
    execution_count: int
    requests: RequestStats


@dataclass(frozen=True, slots=True)
class IndexEntry:
    name: str
    version: str
    state: str  # READY or UNAVAILABLE
    reason: str = ""
