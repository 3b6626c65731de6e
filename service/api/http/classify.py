"""The JSON API for people: list models, describe one, classify texts.

    GET  /v1/models                       every served model (latest version)
    GET  /v1/models/{name}[?version=N]    one model: labels, attention modes, limits
    POST /v1/models/{name}:classify       {"texts": [...], "attention": "pooled", "top_k": 3, "version": 2}

A reply carries what the gRPC Classify reply carries, as JSON: label, probabilities,
logits, tokens, truncated, attention as nested lists in the requested mode, top tokens,
and timings in microseconds. Errors are `{"error": {"code", "message"}}`.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from attnserve.service.api.http import engine
from attnserve.service.api.http.calls import HttpCalls
from attnserve.service.api.http.errors import api_error
from attnserve.service.api.http.proto_json import to_json
from attnserve.service.api.native import model_info
from attnserve.service.engine.attention import AttentionMode
from attnserve.service.engine.classify import Outputs
from attnserve.service.engine.model import LoadedModel
from attnserve.service.errors import InvalidArgument
from attnserve.service.grpc.calls import CallRecord

AttentionName = Literal["none", "pooled", "last_layer", "all", "rollout"]
MODES: dict[str, AttentionMode] = {mode.name.lower(): mode for mode in AttentionMode}


class ClassifyRequest(BaseModel):
    """Texts to classify and what to return about them."""

    model_config = ConfigDict(extra="forbid", strict=True)

    texts: list[str] = Field(min_length=1, description="Texts to classify (at most --max-texts-per-request).")
    attention: AttentionName = Field(
        "none",
        description="Attention to return per text: pooled ([n] or [n, n]), last_layer ([heads, n, n]), "
        "all ([layers, heads, n, n]), rollout ([n, n]) or none.",
    )
    top_k: int = Field(0, ge=0, le=512, description="Also return the k tokens with the most attention.")
    version: int = Field(0, ge=0, description="Model version; 0 is the latest served.")
    request_id: str = Field("", max_length=256, description="Echoed in the reply.")


class TokenWeight(BaseModel):
    index: int
    token: str
    weight: float


class TextResult(BaseModel):
    label: str
    label_id: int
    probabilities: list[float]
    logits: list[float]
    tokens: list[str]
    truncated: bool
    attention: Any = Field(None, description="Nested lists in the requested mode; null when none.")
    top_tokens: list[TokenWeight] = []


class Timings(BaseModel):
    tokenize_us: int
    queue_us: int
    inference_us: int
    total_us: int


class ClassifyResponse(BaseModel):
    model: str
    version: int
    labels: list[str]
    attention: AttentionName
    request_id: str
    results: list[TextResult]
    timings: Timings


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


def classified_json(
    model: LoadedModel, request: ClassifyRequest, out: Outputs, started: float
) -> dict[str, Any]:
    encoded = out.encoded
    label_ids = out.label_ids.tolist()
    logits, probabilities = out.logits.tolist(), out.probabilities.tolist()
    results = []
    for i, label_id in enumerate(label_ids):
        tokens = encoded.tokens(i)
        item: dict[str, Any] = {
            "label": model.labels[label_id],
            "label_id": label_id,
            "probabilities": probabilities[i],
            "logits": logits[i],
            "tokens": tokens,
            "truncated": encoded.truncated[i],
            "attention": None if out.attention is None else out.attention[i].tolist(),
            "top_tokens": [],
        }
        if out.top_tokens is not None:
            index, weight = out.top_tokens[i]
            item["top_tokens"] = [
                {"index": j, "token": tokens[j], "weight": w}
                for j, w in zip(index.tolist(), weight.tolist(), strict=True)
            ]
        results.append(item)
    return {
        "model": model.name,
        "version": model.version,
        "labels": list(model.labels),
        "attention": request.attention,
        "request_id": request.request_id,
        "results": results,
        "timings": {
            "tokenize_us": int(out.timings.tokenize * 1e6),
            "queue_us": int(out.timings.queue * 1e6),
            "inference_us": int(out.timings.inference * 1e6),
            "total_us": int((time.perf_counter() - started) * 1e6),
        },
    }


def _version(request: Request) -> int:
    value = request.query_params.get("version", "0")
    if not value.isdigit():
        raise InvalidArgument(f"version: {value[:32]!r} is not a version number (0 = latest)")
    return int(value)


class ClassifyApi:
    def __init__(self, calls: HttpCalls) -> None:
        self.calls = calls
        self.core = calls.core

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/v1/models", self._endpoint(self.list_models, counted=False)),
            Route(
                "/v1/models/{name}:classify", self._endpoint(self.classify, counted=True), methods=["POST"]
            ),
            Route("/v1/models/{name}", self._endpoint(self.get_model, counted=False)),
        ]

    def _endpoint(self, method: Any, *, counted: bool) -> Any:
        async def endpoint(request: Request) -> Response:
            return await self.calls.run(request, method, api_error, counted=counted)

        return endpoint

    async def list_models(self, request: Request, record: CallRecord) -> Response:
        models = [
            to_json(model_info(self.core, entry.latest)) for entry in self.core.repository.models.values()
        ]
        return JSONResponse({"models": models})

    async def get_model(self, request: Request, record: CallRecord) -> Response:
        model = engine.resolve(self.core, str(request.path_params["name"]), _version(request))
        return JSONResponse(to_json(model_info(self.core, model)))

    async def classify(self, request: Request, record: CallRecord) -> Response:
        started = time.perf_counter()
        body = parse_classify(await self.calls.json(request))
        model = engine.resolve(self.core, str(request.path_params["name"]), body.version)
        record.model = model.metrics
        record.texts = len(body.texts)
        result = await engine.classify(
            self.core, model, body.texts, MODES[body.attention], body.top_k, self.calls.deadline(request)
        )
        return JSONResponse(classified_json(model, body, result, started))
