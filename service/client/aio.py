"""The asyncio client of the attnserve.v1 API: `Client`'s methods as coroutines, plus
`stream()` over ClassifyStream and `watch_health()`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from types import TracebackType
from typing import Any

from grpc_health.v1 import health_pb2, health_pb2_grpc

from attnserve.service.client.channels import PLAINTEXT, Security, open_aio_channel
from attnserve.service.client.messages import (
    Classification,
    build_request,
    rpc_errors,
    to_classification,
    to_model_info,
)
from attnserve.service.client.stubs import bidi, health_name, unary
from attnserve.service.client.sync import CLASSIFIER
from attnserve.service.client.tracecontext import with_trace
from attnserve.service.common.model_info import ModelInfo
from attnserve.service.common.vocabulary import AttentionMode, Attribution
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb


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
        self._classify = unary(self.channel, CLASSIFIER, "Classify")
        self._stream = bidi(self.channel, CLASSIFIER, "ClassifyStream")
        self._list = unary(self.channel, CLASSIFIER, "ListModels")
        self._health = health_pb2_grpc.HealthStub(self.channel)

    async def classify(
        self,
        texts: str | Sequence[str],
        *,
        model: str = "",
        version: int = 0,
        attention: str | int = AttentionMode.NONE,
        top_k: int = 0,
        timeout: float | None = None,
        request_id: str = "",
        attribution: str | int = Attribution.NONE,
        attribution_budget: int = 0,
        attribution_label: str = "",
        long_text: str = "",
    ) -> Classification:
        """`attribution`: none, occlusion or shapley (each result then has `attribution`, one
        score per token, and `attribution_rows`); `attribution_budget`: shapley's forward rows
        per text (0: the server's default); `attribution_label`: the label whose score is
        explained, by name ("": each text's own label); `long_text`: a text over the model's
        max_len is cut ("truncate"), refused ("reject") or read whole as windows ("windows",
        each result then has `windows`); "": the server's choice."""
        request = build_request(
            texts, model, version, attention, top_k, request_id, attribution, attribution_budget,
            attribution_label, long_text,
        )  # fmt: skip
        with rpc_errors():
            reply = await self._classify(
                request, timeout=timeout or self.timeout, metadata=with_trace(self.metadata)
            )
            return to_classification(reply)

    async def stream(
        self,
        requests: AsyncIterator[pb.ClassifyRequest] | Iterable[pb.ClassifyRequest],
        *,
        timeout: float | None = None,
    ) -> AsyncIterator[Classification]:
        """ClassifyStream: one Classification per request, in order (build requests with
        `build_request`); a failed request's reply has `error` set."""
        source = requests if isinstance(requests, AsyncIterator) else iter(requests)
        call = self._stream(source, timeout=timeout, metadata=with_trace(self.metadata))
        with rpc_errors():
            async for reply in call:
                yield to_classification(reply)

    async def models(self) -> list[ModelInfo]:
        with rpc_errors():
            reply = await self._list(
                pb.ListModelsRequest(), timeout=self.timeout, metadata=with_trace(self.metadata)
            )
        return [to_model_info(info) for info in reply.models]

    async def health(self, service: str = "") -> str:
        with rpc_errors():
            reply = await self._health.Check(
                health_pb2.HealthCheckRequest(service=service),
                timeout=self.timeout,
                metadata=with_trace(self.metadata),
            )
        return health_name(reply.status)

    async def watch_health(self, service: str = "") -> AsyncIterator[str]:
        """Health status changes as the server reports them (grpc.health.v1 Watch)."""
        with rpc_errors():
            async for reply in self._health.Watch(health_pb2.HealthCheckRequest(service=service)):
                yield health_name(reply.status)

    async def close(self) -> None:
        await self.channel.close(None)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
