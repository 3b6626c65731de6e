"""Python clients of the attnserve.v1 API returning plain Python / numpy values.

    with Client("127.0.0.1:50051") as client:
        reply = client.classify(["the white car is left of the black car"], attention="pooled")
        reply.results[0].label, reply.results[0].attention  # str, np.ndarray [n] or [n, n]

`AsyncClient` has the same methods as coroutines, plus `stream()` over ClassifyStream.
Failures raise `ClientError` with the gRPC status code and the server's message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, cast

import grpc
import numpy as np
from attnserve.service.channels import PLAINTEXT, Security, open_aio_channel, open_channel
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVICE = pb.DESCRIPTOR.services_by_name["Classifier"].full_name
ATTENTION_MODES = {"none": 1, "pooled": 2, "last_layer": 3, "all": 4, "rollout": 5}


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


@dataclass(frozen=True)
class TopToken:
    index: int
    token: str
    weight: float


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


@dataclass(frozen=True)
class Classification:
    model: str
    version: int
    results: list[TextResult]
    timings_us: dict[str, int]
    request_id: str = ""
    error: ClientError | None = None  # only set on ClassifyStream replies for a failed request


@dataclass(frozen=True)
class ModelInfo:
    name: str
    version: int
    versions: list[int]
    family: str
    labels: list[str]
    max_len: int
    attention_kind: str
    attention_layers: int
    attention_heads: int
    attention_shapes: dict[str, str]
    limits: dict[str, Any]
    provider: str
    metrics: dict[str, float] = field(default_factory=dict)
    created_at: str = ""


def attention_value(mode: str | int) -> int:
    if isinstance(mode, int):
        return mode
    try:
        return ATTENTION_MODES[mode.lower().replace("-", "_")]
    except KeyError:
        raise ValueError(
            f"unknown attention mode {mode!r}; choose from {', '.join(ATTENTION_MODES)}"
        ) from None


def build_request(
    texts: str | Sequence[str],
    model: str = "",
    version: int = 0,
    attention: str | int = "none",
    top_k: int = 0,
    request_id: str = "",
) -> pb.ClassifyRequest:
    items = [texts] if isinstance(texts, str) else list(texts)
    return pb.ClassifyRequest(
        model=model,
        version=version,
        texts=items,
        attention=cast("pb.AttentionMode", attention_value(attention)),
        top_k=top_k,
        request_id=request_id,
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
        )
        for item in reply.results
    ]
    timings = {
        "tokenize": reply.timings.tokenize_us,
        "queue": reply.timings.queue_us,
        "inference": reply.timings.inference_us,
        "total": reply.timings.total_us,
    }
    return Classification(reply.model, reply.version, results, timings, reply.request_id, error)


def to_model_info(info: pb.ModelInfo) -> ModelInfo:
    limits = info.limits
    return ModelInfo(
        name=info.name,
        version=info.version,
        versions=list(info.versions),
        family=info.family,
        labels=list(info.labels),
        max_len=info.max_len,
        attention_kind=info.attention.kind,
        attention_layers=info.attention.layers,
        attention_heads=info.attention.heads,
        attention_shapes=dict(info.attention.shapes),
        limits={
            "max_texts_per_request": limits.max_texts_per_request,
            "max_text_chars": limits.max_text_chars,
            "max_batch_size": limits.max_batch_size,
            "max_batch_tokens": limits.max_batch_tokens,
            "long_text": limits.long_text,
        },
        provider=info.provider,
        metrics=dict(info.metrics),
        created_at=info.created_at,
    )


def _health_name(status: int) -> str:
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(status))


class Client:
    """Blocking client. `timeout` (seconds) is the default deadline of each call; `security`
    gives TLS files and the bearer token (service/channels.py)."""

    def __init__(
        self,
        target: str = "127.0.0.1:50051",
        *,
        timeout: float | None = 30.0,
        options: Sequence[tuple[str, Any]] = (),
        security: Security = PLAINTEXT,
    ) -> None:
        self.timeout = timeout
        self.metadata = security.metadata
        self.channel = open_channel(target, security, options)
        ser = pb.ClassifyRequest.SerializeToString
        self._classify = self.channel.unary_unary(
            f"/{SERVICE}/Classify",
            request_serializer=ser,
            response_deserializer=pb.ClassifyResponse.FromString,
        )
        self._list = self.channel.unary_unary(
            f"/{SERVICE}/ListModels",
            request_serializer=pb.ListModelsRequest.SerializeToString,
            response_deserializer=pb.ListModelsResponse.FromString,
        )
        self._get = self.channel.unary_unary(
            f"/{SERVICE}/GetModel",
            request_serializer=pb.GetModelRequest.SerializeToString,
            response_deserializer=pb.ModelInfo.FromString,
        )
        self._health = health_pb2_grpc.HealthStub(self.channel)

    def classify(
        self,
        texts: str | Sequence[str],
        *,
        model: str = "",
        version: int = 0,
        attention: str | int = "none",
        top_k: int = 0,
        timeout: float | None = None,
        request_id: str = "",
    ) -> Classification:
        request = build_request(texts, model, version, attention, top_k, request_id)
        try:
            reply = self._classify(request, timeout=timeout or self.timeout, metadata=self.metadata)
            return to_classification(reply)
        except grpc.RpcError as exc:
            raise ClientError.from_rpc(exc) from None

    def models(self) -> list[ModelInfo]:
        try:
            reply = self._list(pb.ListModelsRequest(), timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as exc:
            raise ClientError.from_rpc(exc) from None
        return [to_model_info(info) for info in reply.models]

    def model(self, name: str = "", version: int = 0) -> ModelInfo:
        try:
            request = pb.GetModelRequest(model=name, version=version)
            return to_model_info(self._get(request, timeout=self.timeout, metadata=self.metadata))
        except grpc.RpcError as exc:
            raise ClientError.from_rpc(exc) from None

    def health(self, service: str = "") -> str:
        """ "SERVING", "NOT_SERVING", ... for the server ("") or one model name."""
        try:
            reply = self._health.Check(
                health_pb2.HealthCheckRequest(service=service), timeout=self.timeout, metadata=self.metadata
            )
        except grpc.RpcError as exc:
            raise ClientError.from_rpc(exc) from None
        return _health_name(reply.status)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncClient:
    """asyncio client; create it inside a running event loop."""

    def __init__(
        self,
        target: str = "127.0.0.1:50051",
        *,
        timeout: float | None = 30.0,
        options: Sequence[tuple[str, Any]] = (),
        security: Security = PLAINTEXT,
    ) -> None:
        self.timeout = timeout
        self.metadata = security.metadata
        self.channel = open_aio_channel(target, security, options)
        self._classify = self.channel.unary_unary(
            f"/{SERVICE}/Classify",
            request_serializer=pb.ClassifyRequest.SerializeToString,
            response_deserializer=pb.ClassifyResponse.FromString,
        )
        self._stream = self.channel.stream_stream(
            f"/{SERVICE}/ClassifyStream",
            request_serializer=pb.ClassifyRequest.SerializeToString,
            response_deserializer=pb.ClassifyResponse.FromString,
        )
        self._list = self.channel.unary_unary(
            f"/{SERVICE}/ListModels",
            request_serializer=pb.ListModelsRequest.SerializeToString,
            response_deserializer=pb.ListModelsResponse.FromString,
        )
        self._health = health_pb2_grpc.HealthStub(self.channel)

    async def classify(
        self,
        texts: str | Sequence[str],
        *,
        model: str = "",
        version: int = 0,
        attention: str | int = "none",
        top_k: int = 0,
        timeout: float | None = None,
        request_id: str = "",
    ) -> Classification:
        request = build_request(texts, model, version, attention, top_k, request_id)
        try:
            reply = await self._classify(request, timeout=timeout or self.timeout, metadata=self.metadata)
            return to_classification(reply)
        except grpc.RpcError as exc:
            raise ClientError.from_rpc(exc) from None

    async def stream(
        self,
        requests: AsyncIterator[pb.ClassifyRequest] | Iterable[pb.ClassifyRequest],
        *,
        timeout: float | None = None,
    ) -> AsyncIterator[Classification]:
        """ClassifyStream: one Classification per request, in order (build requests with
        `build_request`); a failed request's reply has `error` set."""
        source = requests if isinstance(requests, AsyncIterator) else iter(requests)
        call = self._stream(source, timeout=timeout, metadata=self.metadata)
        try:
            async for reply in call:
                yield to_classification(reply)
        except grpc.RpcError as exc:
            raise ClientError.from_rpc(exc) from None

    async def models(self) -> list[ModelInfo]:
        try:
            reply = await self._list(pb.ListModelsRequest(), timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as exc:
            raise ClientError.from_rpc(exc) from None
        return [to_model_info(info) for info in reply.models]

    async def health(self, service: str = "") -> str:
        try:
            reply = await self._health.Check(
                health_pb2.HealthCheckRequest(service=service), timeout=self.timeout, metadata=self.metadata
            )
        except grpc.RpcError as exc:
            raise ClientError.from_rpc(exc) from None
        return _health_name(reply.status)

    async def watch_health(self, service: str = "") -> AsyncIterator[str]:
        """Health status changes as the server reports them (grpc.health.v1 Watch)."""
        try:
            async for reply in self._health.Watch(health_pb2.HealthCheckRequest(service=service)):
                yield _health_name(reply.status)
        except grpc.RpcError as exc:
            raise ClientError.from_rpc(exc) from None

    async def close(self) -> None:
        await self.channel.close(None)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
