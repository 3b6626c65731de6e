"""The blocking client of the attnserve.v1 API.

    with Client("127.0.0.1:50051") as client:
        reply = client.classify(["the white car is left of the black car"], attention="pooled")
        reply.results[0].label, reply.results[0].attention  # str, np.ndarray [n] or [n, n]

Failures raise `ClientError` with the gRPC status code and the server's message.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from grpc_health.v1 import health_pb2, health_pb2_grpc

from attnserve.service.client.channels import PLAINTEXT, Security, open_channel
from attnserve.service.client.messages import (
    Classification,
    build_request,
    rpc_errors,
    to_classification,
    to_model_info,
)
from attnserve.service.client.stubs import health_name, unary
from attnserve.service.client.tracecontext import with_trace
from attnserve.service.common.model_info import ModelInfo
from attnserve.service.common.vocabulary import AttentionMode, Attribution
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb

if TYPE_CHECKING:
    from attnserve.service.client.files import JobReport

CLASSIFIER = pb.DESCRIPTOR.services_by_name["Classifier"]


class Client:
    """Blocking client. `timeout` (seconds) is the default deadline of each call; `security`
    gives TLS files and the bearer token (service/client/channels.py)."""

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
        self._classify = unary(self.channel, CLASSIFIER, "Classify")
        self._list = unary(self.channel, CLASSIFIER, "ListModels")
        self._get = unary(self.channel, CLASSIFIER, "GetModel")
        self._health = health_pb2_grpc.HealthStub(self.channel)

    def classify(
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
            reply = self._classify(
                request, timeout=timeout or self.timeout, metadata=with_trace(self.metadata)
            )
            return to_classification(reply)

    def classify_file(self, input: str | Path, output: str | Path, **options: Any) -> JobReport:
        """Classify every row of a CSV, JSONL or Parquet file into `output`, in input order;
        `options` are `FileJob`'s fields (text_column, batch_size, workers, resume, ...)."""
        from attnserve.service.client.files import FileJob, classify_file

        return classify_file(self, FileJob(Path(input), Path(output), **options))

    def models(self) -> list[ModelInfo]:
        with rpc_errors():
            reply = self._list(
                pb.ListModelsRequest(), timeout=self.timeout, metadata=with_trace(self.metadata)
            )
        return [to_model_info(info) for info in reply.models]

    def model(self, name: str = "", version: int = 0) -> ModelInfo:
        with rpc_errors():
            request = pb.GetModelRequest(model=name, version=version)
            return to_model_info(self._get(request, timeout=self.timeout, metadata=with_trace(self.metadata)))

    def health(self, service: str = "") -> str:
        """ "SERVING", "NOT_SERVING", ... for the server ("") or one model name."""
        with rpc_errors():
            reply = self._health.Check(
                health_pb2.HealthCheckRequest(service=service),
                timeout=self.timeout,
                metadata=with_trace(self.metadata),
            )
        return health_name(reply.status)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
