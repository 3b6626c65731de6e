"""The JSON API for people: list models, describe one, classify texts.

    GET  /v1/models                       every served model (latest version)
    GET  /v1/models/{name}[?version=N]    one model: labels, attention modes, limits
    POST /v1/models/{name}:classify       {"texts": [...], "attention": "pooled", "top_k": 3, "version": 2}

A reply carries what the gRPC Classify reply carries, as JSON: label, probabilities,
logits, tokens with their character offsets and special flags, truncated, attention as
nested lists in the requested mode, top tokens, and timings in microseconds. Errors are
`{"error": {"code", "message"}}`.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from attnserve.service.api.http.calls import HttpCalls
from attnserve.service.api.http.errors import api_error
from attnserve.service.api.http.openapi import (
    AttentionInfo,
    ClassifyRequest,
    ClassifyResponse,
    LimitsInfo,
    ModelInfo,
    ModelList,
    TextResult,
    Timings,
    TokenWeight,
)
from attnserve.service.api.models import ModelInfo as ModelFacts
from attnserve.service.api.models import mode_name, model_info
from attnserve.service.calls.call import Call
from attnserve.service.edges import check_text, check_texts, parse_version
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.request.attention import AttentionMode
from attnserve.service.engine.request.classify import Inputs, Outputs
from attnserve.service.errors import InvalidArgument

__all__ = ["ClassifyApi", "ClassifyRequest", "ClassifyResponse"]
MODES: dict[str, AttentionMode] = {mode.name.lower(): mode for mode in AttentionMode}


def parse_classify(document: object) -> ClassifyRequest:
    try:
        return ClassifyRequest.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        if not where:
            raise InvalidArgument("request body: expected a JSON object") from None
        if first["type"] == "extra_forbidden":
            known = ", ".join(ClassifyRequest.model_fields)
            raise InvalidArgument(f"request body: unknown field {where[:64]!r} (fields: {known})") from None
        raise InvalidArgument(f"{where}: {first['msg']}") from None


def classified(
    model: LoadedModel, request: ClassifyRequest, out: Outputs, started: float
) -> ClassifyResponse:
    """The reply, built from the models the OpenAPI document describes (constructed, not
    validated: every value comes from the engine, typed already)."""
    encoded = out.encoded
    label_ids = out.label_ids.tolist()
    logits, probabilities = out.logits.tolist(), out.probabilities.tolist()
    results = []
    for i, label_id in enumerate(label_ids):
        tokens = encoded.tokens(i)
        top: list[TokenWeight] = []
        if out.top_tokens is not None:
            index, weight = out.top_tokens[i]
            top = [
                TokenWeight.model_construct(index=j, token=tokens[j], weight=w)
                for j, w in zip(index.tolist(), weight.tolist(), strict=True)
            ]
        results.append(
            TextResult.model_construct(
                label=model.labels[label_id],
                label_id=label_id,
                probabilities=probabilities[i],
                logits=logits[i],
                tokens=tokens,
                offsets=encoded.offsets(i),
                special=encoded.special(i),
                truncated=encoded.truncated[i],
                attention=None if out.attention is None else out.attention[i].tolist(),
                top_tokens=top,
            )
        )
    timings = out.timings
    return ClassifyResponse.model_construct(
        model=model.name,
        version=model.version,
        labels=list(model.labels),
        attention=request.attention,
        request_id=request.request_id,
        results=results,
        timings=Timings.model_construct(
            tokenize_us=int(timings.tokenize * 1e6),
            queue_us=int(timings.queue * 1e6),
            inference_us=int(timings.inference * 1e6),
            total_us=int((time.perf_counter() - started) * 1e6),
        ),
    )


def described(info: ModelFacts) -> ModelInfo:
    """A model's description, field for field as the attnserve.v1 `ModelInfo` message."""
    limits = info.limits
    return ModelInfo.model_construct(
        name=info.name,
        version=info.version,
        versions=info.versions,
        family=info.family,
        labels=info.labels,
        max_len=info.max_len,
        attention=AttentionInfo.model_construct(
            kind=info.attention_kind,
            layers=info.layers,
            heads=info.heads,
            modes=[mode_name(mode) for mode in info.shapes],
            shapes={mode_name(mode): shape for mode, shape in info.shapes.items()},
        ),
        limits=LimitsInfo.model_construct(
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


def _json(reply: BaseModel) -> Response:
    """The reply serialized by pydantic's own (compiled) serializer, straight to bytes."""
    return Response(reply.model_dump_json(), media_type="application/json")


def _version(request: Request) -> int:
    return parse_version(request.query_params.get("version", ""), field="version")


class ClassifyApi:
    def __init__(self, calls: HttpCalls) -> None:
        self.calls = calls
        self.core = calls.core

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/v1/models", self._endpoint(self.list_models, counted=False)),
            Route(
                "/v1/models/{name}:classify",
                self._endpoint(self.classify_route, counted=True),
                methods=["POST"],
            ),
            Route("/v1/models/{name}", self._endpoint(self.get_model, counted=False)),
        ]

    def _endpoint(self, method: Any, *, counted: bool) -> Any:
        async def endpoint(request: Request) -> Response:
            return await self.calls.run(request, method, api_error, counted=counted)

        return endpoint

    async def list_models(self, request: Request, call: Call) -> Response:
        models = [
            described(model_info(self.core, entry.latest)) for entry in self.core.repository.models.values()
        ]
        return _json(ModelList.model_construct(models=models))

    async def get_model(self, request: Request, call: Call) -> Response:
        model = self.core.resolve(str(request.path_params["name"]), _version(request))
        return _json(described(model_info(self.core, model)))

    async def classify_route(self, request: Request, call: Call) -> Response:
        started = time.perf_counter()
        body = parse_classify(await self.calls.json(request, call))
        check_texts(body.texts, field="texts")
        check_text(body.request_id, field="request_id")
        model = self.core.resolve(str(request.path_params["name"]), body.version)
        call.model = model.metrics
        call.texts = len(body.texts)
        call.name_request(body.request_id)
        inputs = Inputs(
            texts=body.texts,
            mode=MODES[body.attention],
            top_k=body.top_k,
            deadline=call.deadline,
            trace=call.span_context,
        )
        result = await self.core.classify(model, inputs, call.permit)
        call.outputs = result
        return _json(classified(model, body, result, started))
