"""The Open Inference Protocol ("KServe V2") over gRPC, as Triton speaks it:
`inference.GRPCInferenceService`, a thin adapter around the V2 plane (plane.py).

Same port as attnserve.v1; inference requests join the same batchers. Each handler
converts the message to the plane's types, calls the plane and converts back: inference
here, at the edge (the message read once, the reply written once), the other replies in
v2_codec.py. Inputs arrive either in `raw_input_contents` (one entry per input, in order)
or in each input's typed `contents`; the layout is checked here, the data itself by the
plane's contract. Outputs always go out in `raw_output_contents` (see api/v2/tensors.py).
Methods the proto does not declare are answered UNIMPLEMENTED by grpc itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

import grpc

from attnserve.service.api.grpc import v2_codec
from attnserve.service.api.grpc.handlers import Handlers
from attnserve.service.api.grpc.wire import Context, M, to_bytes
from attnserve.service.api.v2 import attribution
from attnserve.service.api.v2.contract import ATTENTION_MODE, LONG_TEXT, parse_attention_mode
from attnserve.service.api.v2.plane import V2Plane
from attnserve.service.api.v2.types import InferRequest, InferResponse, InputTensor, RequestedOutput
from attnserve.service.calls.auth import Tokens
from attnserve.service.calls.record import Call
from attnserve.service.calls.route import Route
from attnserve.service.common.vocabulary import AttentionMode
from attnserve.service.edges import parse_long_text
from attnserve.service.engine.core import Core
from attnserve.service.errors import InvalidArgument, ServiceError
from attnserve.service.proto.inference import grpc_service_pb2 as pb

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
Reply = Callable[[M, Context], Awaitable[bytes]]


class V2Api:
    """Handlers of `inference.GRPCInferenceService`."""

    service_name = SERVICE_NAME

    def __init__(self, core: Core, plane: V2Plane, tokens: Tokens | None = None) -> None:
        self.core = core
        self.plane = plane
        self._handlers = Handlers(core, "v2", tokens)

    def handler(self) -> grpc.GenericRpcHandler[bytes, bytes]:
        handlers = self._handlers
        routes = handlers.routes

        def info(
            message_type: type[M], method: Reply[M], route: Route = routes.metadata
        ) -> grpc.RpcMethodHandler[bytes, bytes]:
            return handlers.unary(message_type, lambda request, context, _: method(request, context), route)

        return handlers.service(
            SERVICE_NAME,
            {
                "ServerLive": info(pb.ServerLiveRequest, self.server_live, routes.health),
                "ServerReady": info(pb.ServerReadyRequest, self.server_ready, routes.health),
                "ModelReady": info(pb.ModelReadyRequest, self.model_ready, routes.health),
                "ServerMetadata": info(pb.ServerMetadataRequest, self.server_metadata, routes.server),
                "ModelMetadata": info(pb.ModelMetadataRequest, self.model_metadata),
                "ModelConfig": info(pb.ModelConfigRequest, self.model_config),
                "ModelStatistics": info(pb.ModelStatisticsRequest, self.model_statistics),
                "RepositoryIndex": info(pb.RepositoryIndexRequest, self.repository_index),
                "ModelInfer": handlers.unary(pb.ModelInferRequest, self.model_infer),
                "ModelStreamInfer": handlers.stream(pb.ModelInferRequest, self.stream_infer, _stream_error),
            },
        )

    # --- health and metadata ------------------------------------------------------------
    async def server_live(self, request: pb.ServerLiveRequest, context: Context) -> bytes:
        return to_bytes(pb.ServerLiveResponse(live=True))

    async def server_ready(self, request: pb.ServerReadyRequest, context: Context) -> bytes:
        return to_bytes(pb.ServerReadyResponse(ready=self.plane.ready()))

    async def model_ready(self, request: pb.ModelReadyRequest, context: Context) -> bytes:
        return to_bytes(pb.ModelReadyResponse(ready=self.plane.model_ready(request.name, request.version)))

    async def server_metadata(self, request: pb.ServerMetadataRequest, context: Context) -> bytes:
        return to_bytes(v2_codec.server_metadata(self.plane.server_metadata()))

    async def model_metadata(self, request: pb.ModelMetadataRequest, context: Context) -> bytes:
        return to_bytes(v2_codec.model_metadata(self.plane.model_metadata(request.name, request.version)))

    async def model_config(self, request: pb.ModelConfigRequest, context: Context) -> bytes:
        return to_bytes(v2_codec.model_config(self.plane.model_config(request.name, request.version)))

    async def model_statistics(self, request: pb.ModelStatisticsRequest, context: Context) -> bytes:
        return to_bytes(v2_codec.model_statistics(self.plane.statistics(request.name, request.version)))

    async def repository_index(self, request: pb.RepositoryIndexRequest, context: Context) -> bytes:
        index = await self.plane.repository_index(request.repository_name, request.ready)
        return to_bytes(v2_codec.repository_index(index))

    # --- inference ----------------------------------------------------------------------
    async def model_infer(self, request: pb.ModelInferRequest, context: Context, call: Call) -> bytes:
        response = await self.plane.infer(infer_request(request), call)
        return infer_response_bytes(response)

    async def stream_infer(self, request: pb.ModelInferRequest, context: Context, call: Call) -> bytes:
        response = await self.plane.infer(infer_request(request), call)
        return stream_response_bytes(response)


def infer_request(message: pb.ModelInferRequest) -> InferRequest:
    """The plain request, checking the raw/typed layout the protocol allows."""
    raw = message.raw_input_contents
    if raw and len(raw) != len(message.inputs):
        raise InvalidArgument(
            f"raw_input_contents has {len(raw)} entries for {len(message.inputs)} inputs; "
            "it needs exactly one per input, in the order of inputs"
        )
    inputs = []
    for index, spec in enumerate(message.inputs):
        has_contents = spec.HasField("contents")
        if raw and has_contents:
            raise InvalidArgument(
                f"input {spec.name[:64]}: has typed contents although the request uses raw_input_contents"
            )
        values = None
        if has_contents:
            contents = spec.contents
            values = contents.bytes_contents if spec.datatype == "BYTES" else contents.int64_contents
        inputs.append(
            InputTensor(spec.name, spec.datatype, tuple(spec.shape), raw[index] if raw else None, values)
        )
    outputs = [
        RequestedOutput(o.name, "classification" in o.parameters, _attention_mode(o.parameters, o.name))
        for o in message.outputs
    ]
    request = InferRequest(message.model_name, message.model_version, message.id, inputs, outputs)
    parameters = message.parameters
    if not parameters:  # every default
        return request
    method, budget, label = None, 0, ""
    if any(name in parameters for name in attribution.PARAMETERS):
        method, budget, label = attribution.read_parameters(
            {name: _value(parameters[name]) for name in attribution.PARAMETERS if name in parameters}
        )
    return replace(
        request,
        attention_mode=_attention_mode(parameters),
        attribution=method,
        attribution_budget=budget,
        attribution_label=label,
        long_text=parse_long_text(_value(parameters[LONG_TEXT]), field=f"parameters.{LONG_TEXT}")
        if LONG_TEXT in parameters
        else None,
    )


def _value(parameter: pb.InferParameter) -> object:
    """A parameter's value, whichever kind it was sent as ("" when none was set)."""
    kind = parameter.WhichOneof("parameter_choice")
    return "" if kind is None else getattr(parameter, kind)


def _attention_mode(parameters: Mapping[str, pb.InferParameter], output: str = "") -> AttentionMode | None:
    """The `attention_mode` parameter of the request, or of its `output`, when given."""
    if ATTENTION_MODE not in parameters:
        return None
    parameter = parameters[ATTENTION_MODE]
    kind = parameter.WhichOneof("parameter_choice")
    where = f"output {output[:64]}: " if output else ""
    return parse_attention_mode(
        None if kind is None else getattr(parameter, kind), f"{where}parameters.{ATTENTION_MODE}"
    )


def infer_response_bytes(response: InferResponse) -> bytes:
    """`response` as a serialized `inference.ModelInferResponse`. (Writing the wire format
    in Python was tried: it took about 2.5 times as long as protobuf's C builder and
    serializer for a five-tensor reply.)"""
    reply: bytes = _fill(pb.ModelInferResponse(), response).SerializeToString()
    return reply


def stream_response_bytes(response: InferResponse) -> bytes:
    """`response` inside a serialized `inference.ModelStreamInferResponse`."""
    reply = pb.ModelStreamInferResponse()
    _fill(reply.infer_response, response)
    return to_bytes(reply)


def _fill(into: pb.ModelInferResponse, response: InferResponse) -> pb.ModelInferResponse:
    into.model_name = response.model_name
    into.model_version = response.model_version
    into.id = response.id
    add, raws = into.outputs.add, into.raw_output_contents
    for tensor in response.outputs:
        add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        array = tensor.array  # numeric data; BYTES come framed already (api/v2/reply.py)
        raws.append(tensor.raw if array is None else array.tobytes())
    return into


def _stream_error(raw: bytes, error: ServiceError) -> bytes:
    reply = pb.ModelStreamInferResponse(error_message=f"{error.code.name}: {error.message}")
    try:
        request = pb.ModelInferRequest.FromString(raw)
    except Exception:  # the request itself did not parse: no id to echo
        return to_bytes(reply)
    reply.infer_response.id = request.id
    reply.infer_response.model_name = request.model_name
    reply.infer_response.model_version = request.model_version
    return to_bytes(reply)
