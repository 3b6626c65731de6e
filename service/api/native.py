"""The attnserve.v1 Classifier service: convert the request, call the core, convert back."""

from __future__ import annotations

import time
from typing import cast

import grpc
import numpy as np

from attnserve.service.api.models import ModelInfo, mode_name, model_info
from attnserve.service.calls.call import Call
from attnserve.service.engine.core import Core
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.request.attention import AttentionMode
from attnserve.service.engine.request.classify import Inputs, Outputs
from attnserve.service.errors import InvalidArgument, ServiceError
from attnserve.service.grpc.calls import Calls, Context
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Classifier"].full_name
_MODES = {int(mode): mode for mode in AttentionMode}
_MODES[pb.ATTENTION_MODE_UNSPECIFIED] = AttentionMode.NONE


def attention_mode(value: int) -> AttentionMode:
    mode = _MODES.get(value)
    if mode is None:
        known = ", ".join(pb.AttentionMode.keys())
        raise InvalidArgument(f"attention: unknown attention mode {value}; known modes: {known}")
    return mode


def tensor(array: np.ndarray) -> pb.Tensor:
    return pb.Tensor(shape=array.shape, data=np.ascontiguousarray(array, dtype="<f4").tobytes())


def _response(
    model: LoadedModel, out: Outputs, request: pb.ClassifyRequest, started: float
) -> pb.ClassifyResponse:
    encoded, labels = out.encoded, model.labels
    label_ids = out.label_ids.tolist()
    logits, probabilities = out.logits.tolist(), out.probabilities.tolist()
    results = []
    for i, label_id in enumerate(label_ids):
        tokens = encoded.tokens(i)
        item = pb.TextResult(
            label=labels[label_id],
            label_id=label_id,
            probabilities=probabilities[i],
            logits=logits[i],
            tokens=tokens,
            truncated=encoded.truncated[i],
            offsets=[pb.TokenSpan(start=start, end=end) for start, end in encoded.offsets(i)],
            special=encoded.special(i),
        )
        if out.attention is not None:
            item.attention.CopyFrom(tensor(out.attention[i]))
        if out.top_tokens is not None:
            index, weight = out.top_tokens[i]
            item.top_tokens.extend(
                pb.TokenWeight(index=j, token=tokens[j], weight=w)
                for j, w in zip(index.tolist(), weight.tolist(), strict=True)
            )
        results.append(item)
    timings = out.timings
    return pb.ClassifyResponse(
        model=model.name,
        version=model.version,
        results=results,
        timings=pb.Timings(
            tokenize_us=int(timings.tokenize * 1e6),
            queue_us=int(timings.queue * 1e6),
            inference_us=int(timings.inference * 1e6),
            total_us=int((time.perf_counter() - started) * 1e6),
        ),
        request_id=request.request_id,
    )


def model_info_message(info: ModelInfo) -> pb.ModelInfo:
    limits = info.limits
    return pb.ModelInfo(
        name=info.name,
        version=info.version,
        versions=info.versions,
        family=info.family,
        labels=info.labels,
        max_len=info.max_len,
        attention=pb.AttentionInfo(
            kind=info.attention_kind,
            layers=info.layers,
            heads=info.heads,
            modes=[cast("pb.AttentionMode", int(mode)) for mode in info.shapes],
            shapes={mode_name(mode): shape for mode, shape in info.shapes.items()},
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
    )


class NativeApi:
    """Handlers of `attnserve.v1.Classifier`."""

    service_name = SERVICE_NAME

    def __init__(self, core: Core) -> None:
        self.core = core
        self._calls = Calls(core, "native")

    def handler(self) -> grpc.GenericRpcHandler[bytes, bytes]:
        calls = self._calls
        return calls.service(
            SERVICE_NAME,
            {
                "Classify": calls.unary(pb.ClassifyRequest, self.classify_call),
                "ClassifyStream": calls.stream(pb.ClassifyRequest, self.classify_call, self._stream_error),
                "ListModels": calls.unary(pb.ListModelsRequest, self.list_models, counted=False),
                "GetModel": calls.unary(pb.GetModelRequest, self.get_model, counted=False),
            },
        )

    async def classify_call(self, request: pb.ClassifyRequest, context: Context, call: Call) -> bytes:
        started = time.perf_counter()
        model = self.core.resolve(request.model, request.version)
        call.model = model.metrics
        call.texts = len(request.texts)
        call.name_request(request.request_id)
        inputs = Inputs(
            texts=request.texts,
            mode=attention_mode(request.attention),
            top_k=request.top_k,
            deadline=call.deadline,
            trace=call.span_context,
        )
        out = await self.core.classify(model, inputs, call.permit)
        call.outputs = out
        reply: bytes = _response(model, out, request, started).SerializeToString()
        return reply

    @staticmethod
    def _stream_error(raw: bytes, error: ServiceError) -> bytes:
        try:
            request_id = pb.ClassifyRequest.FromString(raw).request_id
        except Exception:  # the request itself did not parse
            request_id = ""
        reply = pb.ClassifyResponse(
            request_id=request_id,
            error=pb.Error(code=error.code.value, code_name=error.code.name, message=error.message),
        )
        data: bytes = reply.SerializeToString()
        return data

    async def list_models(self, request: pb.ListModelsRequest, context: Context, call: Call) -> bytes:
        models = [
            model_info_message(model_info(self.core, entry.latest))
            for entry in self.core.repository.models.values()
        ]
        reply: bytes = pb.ListModelsResponse(models=models).SerializeToString()
        return reply

    async def get_model(self, request: pb.GetModelRequest, context: Context, call: Call) -> bytes:
        model = self.core.resolve(request.model, request.version)
        reply: bytes = model_info_message(model_info(self.core, model)).SerializeToString()
        return reply
