"""The attnserve.v1 Classifier service: the gRPC adapter of the native plane (messages <->
the plane's plain types; api/native/)."""

from __future__ import annotations

from typing import cast

import grpc
import numpy as np

from attnserve.service.api.grpc.handlers import Handlers
from attnserve.service.api.grpc.wire import Context, to_bytes
from attnserve.service.api.native.plane import NativePlane
from attnserve.service.api.native.types import ClassifyReply, ClassifyRequest
from attnserve.service.calls.auth import Tokens
from attnserve.service.calls.record import Call
from attnserve.service.common.model_info import ModelInfo
from attnserve.service.edges import parse_long_text, parse_numbers
from attnserve.service.engine.core import Core
from attnserve.service.errors import ServiceError
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Classifier"].full_name


def tensor(array: np.ndarray) -> pb.Tensor:
    return pb.Tensor(shape=array.shape, data=np.ascontiguousarray(array, dtype="<f4").tobytes())


def classify_request(message: pb.ClassifyRequest) -> ClassifyRequest:
    attention, attribution = parse_numbers(message.attention, message.attribution)
    return ClassifyRequest(
        model=message.model,
        texts=message.texts,
        attention=attention,
        top_k=message.top_k,
        version=message.version,
        request_id=message.request_id,
        attribution=attribution,
        attribution_budget=message.attribution_budget,
        attribution_label=message.attribution_label,
        long_text=parse_long_text(message.long_text) if message.long_text else None,
    )


def classify_response(reply: ClassifyReply) -> pb.ClassifyResponse:
    results = []
    for result in reply.results:
        item = pb.TextResult(
            label=result.label,
            label_id=result.label_id,
            probabilities=result.probabilities,
            logits=result.logits,
            tokens=result.tokens,
            truncated=result.truncated,
            special=result.special,
            answered_by=result.answered_by or "",  # empty: not a cascade
            attribution=result.attribution or (),  # empty: none asked
            attribution_rows=result.attribution_rows or 0,
            assigned=result.assigned or (),  # empty: not multi-label, or no label over its threshold
            value=result.value,  # None (unset): not a regression model
        )
        # Repeated messages are added in loops: a comprehension is one more function call per text.
        offsets = item.offsets
        for start, end in result.offsets:
            offsets.add(start=start, end=end)
        if result.windows:
            windows = item.windows
            for w in result.windows:
                windows.add(
                    start=w.start,
                    end=w.end,
                    probabilities=w.probabilities,
                    weight=w.weight,
                    attribution=w.attribution,
                )
        if result.attention is not None:
            item.attention.CopyFrom(tensor(result.attention))
        if result.top_tokens:
            top_tokens = item.top_tokens
            for top in result.top_tokens:
                top_tokens.add(index=top.index, token=top.token, weight=top.weight)
        results.append(item)
    timings = reply.timings
    return pb.ClassifyResponse(
        model=reply.model,
        version=reply.version,
        results=results,
        timings=pb.Timings(
            tokenize_us=timings.tokenize_us,
            queue_us=timings.queue_us,
            inference_us=timings.inference_us,
            total_us=timings.total_us,
            attribution_us=timings.attribution_us,
        ),
        request_id=reply.request_id,
    )


def model_info_message(info: ModelInfo) -> pb.ModelInfo:
    limits, attention, threads = info.limits, info.attention, info.threads
    return pb.ModelInfo(
        name=info.name,
        version=info.version,
        versions=info.versions,
        family=info.family,
        labels=info.labels,
        max_len=info.max_len,
        attention=pb.AttentionInfo(
            kind=attention.kind,
            layers=attention.layers,
            heads=attention.heads,
            modes=[cast("pb.AttentionMode", int(mode)) for mode in attention.modes],
            shapes={mode.proto_name: shape for mode, shape in attention.shapes.items()},
        ),
        limits=pb.Limits(
            max_texts_per_request=limits.max_texts_per_request,
            max_text_chars=limits.max_text_chars,
            max_batch_size=limits.max_batch_size,
            max_batch_tokens=limits.max_batch_tokens,
            long_text=limits.long_text,
        ),
        provider=info.provider,
        metrics=info.metrics,
        created_at=info.created_at,
        label_graph=info.label_graph,
        problem_type=info.problem_type,
        thresholds=info.thresholds,
        windows=None
        if info.windows is None
        else pb.WindowsInfo(
            window=info.windows.window,
            stride=info.windows.stride,
            combine=info.windows.combine,
            max_windows=info.windows.max_windows,
        ),
        threads=pb.ThreadInfo(
            intra_op=threads.intra_op,
            source=threads.source,
            one_thread_ms=threads.one_thread_ms or 0.0,  # 0: not measured
            all_cores_ms=threads.all_cores_ms or 0.0,
            cores=threads.cores,
        ),
    )


class NativeApi:
    """Handlers of `attnserve.v1.Classifier`."""

    service_name = SERVICE_NAME

    def __init__(self, core: Core, plane: NativePlane, tokens: Tokens | None = None) -> None:
        self.core = core
        self.plane = plane
        self._handlers = Handlers(core, "native", tokens)

    def handler(self) -> grpc.GenericRpcHandler[bytes, bytes]:
        handlers = self._handlers
        return handlers.service(
            SERVICE_NAME,
            {
                "Classify": handlers.unary(pb.ClassifyRequest, self.classify_call),
                "ClassifyStream": handlers.stream(pb.ClassifyRequest, self.classify_call, self._stream_error),
                "ListModels": handlers.unary(
                    pb.ListModelsRequest, self.list_models, handlers.routes.metadata
                ),
                "GetModel": handlers.unary(pb.GetModelRequest, self.get_model, handlers.routes.metadata),
            },
        )

    async def classify_call(self, request: pb.ClassifyRequest, context: Context, call: Call) -> bytes:
        reply = await self.plane.classify(classify_request(request), call)
        return classify_response(reply).SerializeToString()

    @staticmethod
    def _stream_error(raw: bytes, error: ServiceError) -> bytes:
        try:
            request_id = pb.ClassifyRequest.FromString(raw).request_id
        except Exception:  # the request itself did not parse
            request_id = ""
        return to_bytes(
            pb.ClassifyResponse(
                request_id=request_id,
                error=pb.Error(code=error.code.value, code_name=error.code.name, message=error.message),
            )
        )

    async def list_models(self, request: pb.ListModelsRequest, context: Context, call: Call) -> bytes:
        models = [model_info_message(info) for info in self.plane.list_models()]
        return to_bytes(pb.ListModelsResponse(models=models))

    async def get_model(self, request: pb.GetModelRequest, context: Context, call: Call) -> bytes:
        return to_bytes(model_info_message(self.plane.model(request.model, request.version)))
