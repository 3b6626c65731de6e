"""What the clients return: plain Python / numpy values built from attnserve.v1 replies,
and `ClientError`, which every client raises with the gRPC status code and the server's message.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import grpc
import numpy as np

from attnserve.service.common.model_info import AttentionInfo, LimitsInfo, ModelInfo, ThreadInfo, WindowsInfo
from attnserve.service.common.vocabulary import AttentionMode, Attribution
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb

# ModelInfo.problem_type's words (service/bundle/scoring.py `Problem`).
SINGLE_LABEL, MULTI_LABEL, REGRESSION = (
    "single_label_classification",
    "multi_label_classification",
    "regression",
)
SERVICE = pb.DESCRIPTOR.services_by_name["Classifier"].full_name


class ClientError(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details

    @classmethod
    def from_rpc(cls, error: grpc.RpcError) -> ClientError:
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        details = error.details() if hasattr(error, "details") else str(error)
        return cls(code, details or "")


@contextmanager
def rpc_errors() -> Iterator[None]:
    """Turn a grpc.RpcError raised inside the block into a ClientError (sync and asyncio calls)."""
    try:
        yield
    except grpc.RpcError as exc:
        raise ClientError.from_rpc(exc) from None


@dataclass(frozen=True)
class TopToken:
    index: int
    token: str
    weight: float


@dataclass(frozen=True)
class TextWindow:
    """One window of a text read as windows: its characters, its own scores, its weight."""

    start: int
    end: int
    probabilities: np.ndarray  # [C]
    weight: float
    attribution: float | None = None  # occlusion: the text's drop without this window


@dataclass(frozen=True)
class TextResult:
    label: str
    label_id: int
    probabilities: np.ndarray  # [C]
    logits: np.ndarray  # [C]
    tokens: list[str]
    truncated: bool
    attention: np.ndarray | None  # shape depends on the attention mode; token axes have len(tokens)
    top_tokens: list[TopToken]
    # Per token: [start, end) characters in the request text ((0, 0) for [CLS]/[SEP]) and
    # whether the tokenizer added it.
    offsets: list[tuple[int, int]] = field(default_factory=list)
    special: list[bool] = field(default_factory=list)
    answered_by: str = ""  # a cascade's member that answered ("student" or "teacher"); "" otherwise
    # When an attribution was asked: one score per token (its word's; 0 for special tokens),
    # how much it moves the probability of `label`; and the forward rows it took.
    attribution: np.ndarray | None = None  # [len(tokens)] float32
    attribution_rows: int = 0
    # Multi-label models: the labels at or over their threshold, in label order (possibly none);
    # empty for other models. Regression models: the value (`probabilities` is then empty).
    assigned: list[str] = field(default_factory=list)
    value: float | None = None
    # With long_text "windows": the windows the text was read as (one where it fits); empty otherwise.
    windows: list[TextWindow] = field(default_factory=list)


@dataclass(frozen=True)
class Classification:
    model: str
    version: int
    results: list[TextResult]
    timings_us: dict[str, int]
    request_id: str = ""
    error: ClientError | None = None  # only set on ClassifyStream replies for a failed request


def attention_value(mode: str | int) -> int:
    """An attention mode's number from its word ("pooled") or attnserve.v1 name (ValueError
    naming the words otherwise); a number is sent as it is, for the server to judge."""
    return mode if isinstance(mode, int) else int(AttentionMode.parse(mode))


def attribution_value(method: str | int) -> int:
    """An attribution method's number from its word ("occlusion") or attnserve.v1 name."""
    return method if isinstance(method, int) else int(Attribution.parse(method))


def build_request(
    texts: str | Sequence[str],
    model: str = "",
    version: int = 0,
    attention: str | int = AttentionMode.NONE,
    top_k: int = 0,
    request_id: str = "",
    attribution: str | int = Attribution.NONE,
    attribution_budget: int = 0,
    attribution_label: str = "",
    long_text: str = "",
) -> pb.ClassifyRequest:
    """`attribution`: none, occlusion or shapley; `attribution_budget`: shapley's forward rows
    per text (0: the server's default); `attribution_label`: the label whose score the
    attribution explains, by name ("": each text's own label)."""
    items = [texts] if isinstance(texts, str) else list(texts)
    return pb.ClassifyRequest(
        model=model,
        version=version,
        texts=items,
        attention=cast("pb.AttentionMode", attention_value(attention)),
        top_k=top_k,
        request_id=request_id,
        attribution=cast("pb.AttributionMethod", attribution_value(attribution)),
        attribution_budget=attribution_budget,
        attribution_label=attribution_label,
        long_text=long_text,
    )


def tensor_array(message: pb.Tensor) -> np.ndarray:
    return np.frombuffer(message.data, dtype="<f4").reshape(tuple(message.shape))


def to_classification(reply: pb.ClassifyResponse) -> Classification:
    error = None
    if reply.HasField("error"):
        error = ClientError(grpc.StatusCode[reply.error.code_name], reply.error.message)
    results = [
        TextResult(
            label=item.label,
            label_id=item.label_id,
            probabilities=np.asarray(item.probabilities, np.float32),
            logits=np.asarray(item.logits, np.float32),
            tokens=list(item.tokens),
            truncated=item.truncated,
            attention=tensor_array(item.attention) if item.HasField("attention") else None,
            top_tokens=[TopToken(t.index, t.token, t.weight) for t in item.top_tokens],
            offsets=[(span.start, span.end) for span in item.offsets],
            special=list(item.special),
            answered_by=item.answered_by,
            # One score per token when an attribution was asked, and a served text has a token at
            # least; its rows may be 0 (a text of special tokens only has no word to remove).
            attribution=np.asarray(item.attribution, np.float32) if item.attribution else None,
            attribution_rows=item.attribution_rows,
            assigned=list(item.assigned),
            value=item.value if item.HasField("value") else None,
            windows=[
                TextWindow(
                    w.start,
                    w.end,
                    np.asarray(w.probabilities, np.float32),
                    w.weight,
                    w.attribution if w.HasField("attribution") else None,
                )
                for w in item.windows
            ],
        )
        for item in reply.results
    ]
    timings = {
        "tokenize": reply.timings.tokenize_us,
        "queue": reply.timings.queue_us,
        "inference": reply.timings.inference_us,
        "total": reply.timings.total_us,
        "attribution": reply.timings.attribution_us,  # 0 when none was asked
    }
    return Classification(reply.model, reply.version, results, timings, reply.request_id, error)


def to_model_info(info: pb.ModelInfo) -> ModelInfo:
    """The server's description, rebuilt as the type the server wrote it from."""
    limits, attention, threads = info.limits, info.attention, info.threads
    return ModelInfo(
        name=info.name,
        version=info.version,
        versions=list(info.versions),
        family=info.family,
        labels=list(info.labels),
        max_len=info.max_len,
        attention=AttentionInfo(
            kind=attention.kind,
            layers=attention.layers,
            heads=attention.heads,
            modes=[AttentionMode.of_number(mode) for mode in attention.modes],
            shapes={AttentionMode.parse(name): shape for name, shape in attention.shapes.items()},
        ),
        limits=LimitsInfo(
            max_texts_per_request=limits.max_texts_per_request,
            max_text_chars=limits.max_text_chars,
            max_batch_size=limits.max_batch_size,
            max_batch_tokens=limits.max_batch_tokens,
            long_text=limits.long_text,
        ),
        provider=info.provider,
        threads=ThreadInfo(
            intra_op=threads.intra_op,
            source=cast(Any, threads.source or "server"),  # a server that sends none: its own flags
            one_thread_ms=threads.one_thread_ms or None,  # 0 on the wire: not measured
            all_cores_ms=threads.all_cores_ms or None,
            cores=threads.cores,
        ),
        label_graph=info.label_graph,
        metrics=dict(info.metrics),
        created_at=info.created_at,
        problem_type=info.problem_type or SINGLE_LABEL,  # a server that sends none: single-label
        thresholds=list(info.thresholds),
        windows=_windows(info.windows),
    )


def _windows(w: pb.WindowsInfo) -> WindowsInfo | None:
    """The model's windows policy; None from a server that reports none."""
    return WindowsInfo(w.window, w.stride, w.combine, w.max_windows) if w.window else None
