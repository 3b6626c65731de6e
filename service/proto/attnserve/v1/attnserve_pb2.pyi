from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AttentionMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTENTION_MODE_UNSPECIFIED: _ClassVar[AttentionMode]
    ATTENTION_MODE_NONE: _ClassVar[AttentionMode]
    ATTENTION_MODE_POOLED: _ClassVar[AttentionMode]
    ATTENTION_MODE_LAST_LAYER: _ClassVar[AttentionMode]
    ATTENTION_MODE_ALL: _ClassVar[AttentionMode]
    ATTENTION_MODE_ROLLOUT: _ClassVar[AttentionMode]

class AttributionMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTRIBUTION_METHOD_UNSPECIFIED: _ClassVar[AttributionMethod]
    ATTRIBUTION_METHOD_NONE: _ClassVar[AttributionMethod]
    ATTRIBUTION_METHOD_OCCLUSION: _ClassVar[AttributionMethod]
    ATTRIBUTION_METHOD_SHAPLEY: _ClassVar[AttributionMethod]
ATTENTION_MODE_UNSPECIFIED: AttentionMode
ATTENTION_MODE_NONE: AttentionMode
ATTENTION_MODE_POOLED: AttentionMode
ATTENTION_MODE_LAST_LAYER: AttentionMode
ATTENTION_MODE_ALL: AttentionMode
ATTENTION_MODE_ROLLOUT: AttentionMode
ATTRIBUTION_METHOD_UNSPECIFIED: AttributionMethod
ATTRIBUTION_METHOD_NONE: AttributionMethod
ATTRIBUTION_METHOD_OCCLUSION: AttributionMethod
ATTRIBUTION_METHOD_SHAPLEY: AttributionMethod

class Tensor(_message.Message):
    __slots__ = ("shape", "data")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class ClassifyRequest(_message.Message):
    __slots__ = ("model", "version", "texts", "attention", "top_k", "request_id", "attribution", "attribution_budget", "attribution_label", "long_text")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTION_BUDGET_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTION_LABEL_FIELD_NUMBER: _ClassVar[int]
    LONG_TEXT_FIELD_NUMBER: _ClassVar[int]
    model: str
    version: int
    texts: _containers.RepeatedScalarFieldContainer[str]
    attention: AttentionMode
    top_k: int
    request_id: str
    attribution: AttributionMethod
    attribution_budget: int
    attribution_label: str
    long_text: str
    def __init__(self, model: _Optional[str] = ..., version: _Optional[int] = ..., texts: _Optional[_Iterable[str]] = ..., attention: _Optional[_Union[AttentionMode, str]] = ..., top_k: _Optional[int] = ..., request_id: _Optional[str] = ..., attribution: _Optional[_Union[AttributionMethod, str]] = ..., attribution_budget: _Optional[int] = ..., attribution_label: _Optional[str] = ..., long_text: _Optional[str] = ...) -> None: ...

class TextWindow(_message.Message):
    __slots__ = ("start", "end", "probabilities", "weight", "attribution")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    PROBABILITIES_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    probabilities: _containers.RepeatedScalarFieldContainer[float]
    weight: float
    attribution: float
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ..., probabilities: _Optional[_Iterable[float]] = ..., weight: _Optional[float] = ..., attribution: _Optional[float] = ...) -> None: ...

class TokenWeight(_message.Message):
    __slots__ = ("index", "token", "weight")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    index: int
    token: str
    weight: float
    def __init__(self, index: _Optional[int] = ..., token: _Optional[str] = ..., weight: _Optional[float] = ...) -> None: ...

class TokenSpan(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class TextResult(_message.Message):
    __slots__ = ("label", "label_id", "probabilities", "logits", "tokens", "truncated", "attention", "top_tokens", "offsets", "special", "answered_by", "attribution", "attribution_rows", "assigned", "value", "windows")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    LABEL_ID_FIELD_NUMBER: _ClassVar[int]
    PROBABILITIES_FIELD_NUMBER: _ClassVar[int]
    LOGITS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_FIELD_NUMBER: _ClassVar[int]
    TOP_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    SPECIAL_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_BY_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTION_ROWS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    label: str
    label_id: int
    probabilities: _containers.RepeatedScalarFieldContainer[float]
    logits: _containers.RepeatedScalarFieldContainer[float]
    tokens: _containers.RepeatedScalarFieldContainer[str]
    truncated: bool
    attention: Tensor
    top_tokens: _containers.RepeatedCompositeFieldContainer[TokenWeight]
    offsets: _containers.RepeatedCompositeFieldContainer[TokenSpan]
    special: _containers.RepeatedScalarFieldContainer[bool]
    answered_by: str
    attribution: _containers.RepeatedScalarFieldContainer[float]
    attribution_rows: int
    assigned: _containers.RepeatedScalarFieldContainer[str]
    value: float
    windows: _containers.RepeatedCompositeFieldContainer[TextWindow]
    def __init__(self, label: _Optional[str] = ..., label_id: _Optional[int] = ..., probabilities: _Optional[_Iterable[float]] = ..., logits: _Optional[_Iterable[float]] = ..., tokens: _Optional[_Iterable[str]] = ..., truncated: _Optional[bool] = ..., attention: _Optional[_Union[Tensor, _Mapping]] = ..., top_tokens: _Optional[_Iterable[_Union[TokenWeight, _Mapping]]] = ..., offsets: _Optional[_Iterable[_Union[TokenSpan, _Mapping]]] = ..., special: _Optional[_Iterable[bool]] = ..., answered_by: _Optional[str] = ..., attribution: _Optional[_Iterable[float]] = ..., attribution_rows: _Optional[int] = ..., assigned: _Optional[_Iterable[str]] = ..., value: _Optional[float] = ..., windows: _Optional[_Iterable[_Union[TextWindow, _Mapping]]] = ...) -> None: ...

class Timings(_message.Message):
    __slots__ = ("tokenize_us", "queue_us", "inference_us", "total_us", "attribution_us")
    TOKENIZE_US_FIELD_NUMBER: _ClassVar[int]
    QUEUE_US_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_US_FIELD_NUMBER: _ClassVar[int]
    TOTAL_US_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTION_US_FIELD_NUMBER: _ClassVar[int]
    tokenize_us: int
    queue_us: int
    inference_us: int
    total_us: int
    attribution_us: int
    def __init__(self, tokenize_us: _Optional[int] = ..., queue_us: _Optional[int] = ..., inference_us: _Optional[int] = ..., total_us: _Optional[int] = ..., attribution_us: _Optional[int] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "code_name", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    CODE_NAME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    code_name: str
    message: str
    def __init__(self, code: _Optional[int] = ..., code_name: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ClassifyResponse(_message.Message):
    __slots__ = ("model", "version", "results", "timings", "request_id", "error")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    model: str
    version: int
    results: _containers.RepeatedCompositeFieldContainer[TextResult]
    timings: Timings
    request_id: str
    error: Error
    def __init__(self, model: _Optional[str] = ..., version: _Optional[int] = ..., results: _Optional[_Iterable[_Union[TextResult, _Mapping]]] = ..., timings: _Optional[_Union[Timings, _Mapping]] = ..., request_id: _Optional[str] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...

class GetModelRequest(_message.Message):
    __slots__ = ("model", "version")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    model: str
    version: int
    def __init__(self, model: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class AttentionInfo(_message.Message):
    __slots__ = ("kind", "layers", "heads", "modes", "shapes")
    class ShapesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KIND_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    HEADS_FIELD_NUMBER: _ClassVar[int]
    MODES_FIELD_NUMBER: _ClassVar[int]
    SHAPES_FIELD_NUMBER: _ClassVar[int]
    kind: str
    layers: int
    heads: int
    modes: _containers.RepeatedScalarFieldContainer[AttentionMode]
    shapes: _containers.ScalarMap[str, str]
    def __init__(self, kind: _Optional[str] = ..., layers: _Optional[int] = ..., heads: _Optional[int] = ..., modes: _Optional[_Iterable[_Union[AttentionMode, str]]] = ..., shapes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Limits(_message.Message):
    __slots__ = ("max_texts_per_request", "max_text_chars", "max_batch_size", "max_batch_tokens", "long_text")
    MAX_TEXTS_PER_REQUEST_FIELD_NUMBER: _ClassVar[int]
    MAX_TEXT_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LONG_TEXT_FIELD_NUMBER: _ClassVar[int]
    max_texts_per_request: int
    max_text_chars: int
    max_batch_size: int
    max_batch_tokens: int
    long_text: str
    def __init__(self, max_texts_per_request: _Optional[int] = ..., max_text_chars: _Optional[int] = ..., max_batch_size: _Optional[int] = ..., max_batch_tokens: _Optional[int] = ..., long_text: _Optional[str] = ...) -> None: ...

class ThreadInfo(_message.Message):
    __slots__ = ("intra_op", "source", "one_thread_ms", "all_cores_ms", "cores")
    INTRA_OP_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ONE_THREAD_MS_FIELD_NUMBER: _ClassVar[int]
    ALL_CORES_MS_FIELD_NUMBER: _ClassVar[int]
    CORES_FIELD_NUMBER: _ClassVar[int]
    intra_op: int
    source: str
    one_thread_ms: float
    all_cores_ms: float
    cores: int
    def __init__(self, intra_op: _Optional[int] = ..., source: _Optional[str] = ..., one_thread_ms: _Optional[float] = ..., all_cores_ms: _Optional[float] = ..., cores: _Optional[int] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "version", "versions", "family", "labels", "max_len", "attention", "limits", "provider", "metrics", "created_at", "threads", "label_graph", "problem_type", "thresholds", "windows")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MAX_LEN_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    LABEL_GRAPH_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_TYPE_FIELD_NUMBER: _ClassVar[int]
    THRESHOLDS_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    versions: _containers.RepeatedScalarFieldContainer[int]
    family: str
    labels: _containers.RepeatedScalarFieldContainer[str]
    max_len: int
    attention: AttentionInfo
    limits: Limits
    provider: str
    metrics: _containers.ScalarMap[str, float]
    created_at: str
    threads: ThreadInfo
    label_graph: str
    problem_type: str
    thresholds: _containers.RepeatedScalarFieldContainer[float]
    windows: WindowsInfo
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ..., versions: _Optional[_Iterable[int]] = ..., family: _Optional[str] = ..., labels: _Optional[_Iterable[str]] = ..., max_len: _Optional[int] = ..., attention: _Optional[_Union[AttentionInfo, _Mapping]] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., provider: _Optional[str] = ..., metrics: _Optional[_Mapping[str, float]] = ..., created_at: _Optional[str] = ..., threads: _Optional[_Union[ThreadInfo, _Mapping]] = ..., label_graph: _Optional[str] = ..., problem_type: _Optional[str] = ..., thresholds: _Optional[_Iterable[float]] = ..., windows: _Optional[_Union[WindowsInfo, _Mapping]] = ...) -> None: ...

class WindowsInfo(_message.Message):
    __slots__ = ("window", "stride", "combine", "max_windows")
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    COMBINE_FIELD_NUMBER: _ClassVar[int]
    MAX_WINDOWS_FIELD_NUMBER: _ClassVar[int]
    window: int
    stride: int
    combine: str
    max_windows: int
    def __init__(self, window: _Optional[int] = ..., stride: _Optional[int] = ..., combine: _Optional[str] = ..., max_windows: _Optional[int] = ...) -> None: ...
