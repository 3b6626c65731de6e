"""The JSON API for people: list models, describe one, classify texts.

    GET  /v1/models                       every served model (latest version)
    GET  /v1/models/{name}[?version=N]    one model: labels, attention modes, limits
    POST /v1/models/{name}:classify       {"texts": [...], "attention": "pooled", "top_k": 3, "version": 2,
                                           "attribution": "occlusion"}

A reply carries what the gRPC Classify reply carries, as JSON: label, probabilities,
logits, tokens with their character offsets and special flags, truncated, attention as
nested lists in the requested mode, top tokens, the member that answered (cascades only,
else null), and timings in microseconds. Errors are
`{"error": {"code", "message"}}`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from attnserve.service.api.http.errors import api_error
from attnserve.service.api.http.handlers import Endpoint, Handler, Handlers
from attnserve.service.api.native.plane import NativePlane
from attnserve.service.api.native.types import (
    ClassifyReply,
    ClassifyRequest,
    MethodWord,
    ModelList,
    ModeWord,
)
from attnserve.service.calls.record import Call
from attnserve.service.calls.route import Route as CallRoute
from attnserve.service.common.model_info import ModelInfo
from attnserve.service.common.vocabulary import AttentionMode, Attribution
from attnserve.service.edges import check_text, check_texts, parse_long_text, parse_version
from attnserve.service.errors import InvalidArgument

# The replies, written by pydantic's own (compiled) serializer straight to bytes.
REPLY = TypeAdapter(ClassifyReply)
MODEL = TypeAdapter(ModelInfo)
MODELS = TypeAdapter(ModelList)


class ClassifyBody(BaseModel):
    """Texts to classify and what to return about them (the model is named by the path)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    texts: list[str] = Field(min_length=1, description="Texts to classify (at most --max-texts-per-request).")
    attention: ModeWord = Field(
        AttentionMode.NONE,
        description="Attention to return per text: pooled ([n] or [n, n]), last_layer ([heads, n, n]), "
        "all ([layers, heads, n, n]), rollout ([n, n]) or none.",
    )
    top_k: int = Field(0, ge=0, le=512, description="Also return the k tokens with the most attention.")
    version: int = Field(0, ge=0, le=2**63 - 1, description="Model version; 0 is the latest served.")
    request_id: str = Field("", max_length=256, description="Echoed in the reply.")
    attribution: MethodWord = Field(
        Attribution.NONE,
        description="An attribution beside (or instead of) attention: occlusion (each word removed in "
        "turn: a forward row per word) or shapley (KernelSHAP over the words, "
        "attribution_budget - 1 rows a text). Each result then carries `attribution` and `attribution_rows`.",
    )
    attribution_budget: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="shapley: coalitions per text, the text itself included (0: the server's default, "
        "64, raised to words + 1; fewer than words + 1 is refused); the server caps a request's rows at "
        "--max-attribution-rows.",
    )
    long_text: str = Field(
        "",
        max_length=16,
        description="A text over the model's max_len: 'truncate' (cut, flagged as `truncated`), 'reject' "
        "(400) or 'windows' (read whole as overlapping windows; each result then carries `windows`); empty: "
        "the server's --long-text.",
    )
    attribution_label: str = Field(
        "",
        max_length=1024,
        description="The label whose score the attribution explains, by name (one of the model's labels; a "
        "multi-label model scores each label on its own); empty: each text's own label.",
    )


def parse_classify(document: object) -> ClassifyBody:
    try:
        return ClassifyBody.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        if not where:
            raise InvalidArgument("request body: expected a JSON object") from None
        if first["type"] == "extra_forbidden":
            known = ", ".join(ClassifyBody.model_fields)
            raise InvalidArgument(f"request body: unknown field {where[:64]!r} (fields: {known})") from None
        raise InvalidArgument(f"{where}: {first['msg']}") from None


def classify_request(name: str, body: ClassifyBody) -> ClassifyRequest:
    """The plane's request: the body checked at the edge, the model from the path."""
    check_texts(body.texts, field="texts")
    if not body.request_id.isascii():
        check_text(body.request_id, field="request_id")
    return ClassifyRequest(
        model=name,
        texts=body.texts,
        attention=body.attention,
        top_k=body.top_k,
        version=body.version,
        request_id=body.request_id,
        attribution=body.attribution,
        attribution_budget=body.attribution_budget,
        attribution_label=body.attribution_label,
        long_text=parse_long_text(body.long_text) if body.long_text else None,
    )


def _json(content: bytes) -> Response:
    return Response(content, media_type="application/json")


def _version(request: Request) -> int:
    return parse_version(request.query_params.get("version", ""), field="version")


class NativeRest:
    """The JSON API's routes: the HTTP adapter of the native plane."""

    def __init__(self, handlers: Handlers, plane: NativePlane) -> None:
        self.handlers = handlers
        self.plane = plane

    def routes(self) -> list[BaseRoute]:
        routes = self.handlers.routes
        return [
            Route("/v1/models", self._endpoint(self.list_models, routes.metadata)),
            Route(
                "/v1/models/{name}:classify",
                self._endpoint(self.classify_route, routes.inference),
                methods=["POST"],
            ),
            Route("/v1/models/{name}", self._endpoint(self.get_model, routes.metadata)),
        ]

    def _endpoint(self, method: Handler, route: CallRoute) -> Endpoint:
        return self.handlers.endpoint(method, api_error, route)

    async def list_models(self, request: Request, call: Call) -> Response:
        return _json(MODELS.dump_json(ModelList(self.plane.list_models())))

    async def get_model(self, request: Request, call: Call) -> Response:
        return _json(MODEL.dump_json(self.plane.model(str(request.path_params["name"]), _version(request))))

    async def classify_route(self, request: Request, call: Call) -> Response:
        body = parse_classify(await self.handlers.json(request, call))
        plain = classify_request(str(request.path_params["name"]), body)
        return _json(REPLY.dump_json(await self.plane.classify(plain, call)))
