"""The gRPC V2 adapter's conversions: protocol messages to the V2 plane's types and back.

Inputs arrive either in `raw_input_contents` (one entry per input, in order) or in each
input's typed `contents`; the layout is checked here, the data itself by the V2 plane.
Outputs always go out in `raw_output_contents` (see tensors.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from attnserve.service.api.grpc.wire import to_bytes
from attnserve.service.api.v2 import attribution
from attnserve.service.api.v2.contract import ATTENTION_MODE, LONG_TEXT, parse_attention_mode
from attnserve.service.api.v2.tensors import output_raw
from attnserve.service.api.v2.types import (
    ConfigTensor,
    Duration,
    IndexEntry,
    InferRequest,
    InferResponse,
    InputTensor,
    ModelConfig,
    ModelMetadata,
    ModelStats,
    RequestedOutput,
    ServerMetadata,
    TensorDecl,
)
from attnserve.service.common.vocabulary import AttentionMode
from attnserve.service.edges import parse_long_text
from attnserve.service.errors import InvalidArgument
from attnserve.service.proto.inference import grpc_service_pb2 as pb

_CONFIG_TYPES = {
    "TYPE_STRING": pb.TYPE_STRING,
    "TYPE_INT64": pb.TYPE_INT64,
    "TYPE_INT32": pb.TYPE_INT32,
    "TYPE_FP32": pb.TYPE_FP32,
    "TYPE_BOOL": pb.TYPE_BOOL,
}


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
        RequestedOutput(
            o.name,
            "classification" in o.parameters,
            _attention_mode(o.parameters, o.name),
        )
        for o in message.outputs
    ]
    parameters = message.parameters
    method, budget, label = attribution.read_parameters(
        {name: _value(parameters[name]) for name in attribution.PARAMETERS if name in parameters}
    )
    return InferRequest(
        message.model_name,
        message.model_version,
        message.id,
        inputs,
        outputs,
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
    return to_bytes(_fill(pb.ModelInferResponse(), response))


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
        raws.append(output_raw(tensor))
    return into


def server_metadata(metadata: ServerMetadata) -> pb.ServerMetadataResponse:
    return pb.ServerMetadataResponse(
        name=metadata.name, version=metadata.version, extensions=metadata.extensions
    )


def _tensors(decls: tuple[TensorDecl, ...]) -> list[pb.ModelMetadataResponse.TensorMetadata]:
    return [
        pb.ModelMetadataResponse.TensorMetadata(name=d.name, datatype=d.datatype, shape=d.shape)
        for d in decls
    ]


def model_metadata(metadata: ModelMetadata) -> pb.ModelMetadataResponse:
    return pb.ModelMetadataResponse(
        name=metadata.name,
        versions=metadata.versions,
        platform=metadata.platform,
        inputs=_tensors(metadata.inputs),
        outputs=_tensors(metadata.outputs),
    )


def _config_input(tensor: ConfigTensor) -> pb.ModelInput:
    return pb.ModelInput(
        name=tensor.name,
        data_type=_CONFIG_TYPES[tensor.data_type],
        dims=tensor.dims,
        optional=tensor.optional,
    )


def _config_output(tensor: ConfigTensor) -> pb.ModelOutput:
    output = pb.ModelOutput(name=tensor.name, data_type=_CONFIG_TYPES[tensor.data_type], dims=tensor.dims)
    if tensor.reshape:
        output.reshape.SetInParent()  # reshape to [] (present but empty)
    return output


def model_config(config: ModelConfig) -> pb.ModelConfigResponse:
    return pb.ModelConfigResponse(
        config=pb.ModelConfig(
            name=config.name,
            platform=config.platform,
            backend=config.backend,
            max_batch_size=config.max_batch_size,
            input=[_config_input(t) for t in config.inputs],
            output=[_config_output(t) for t in config.outputs],
            dynamic_batching=pb.ModelDynamicBatching(
                preferred_batch_size=[config.preferred_batch_size],
                max_queue_delay_microseconds=config.max_queue_delay_microseconds,
                preserve_ordering=True,
            ),
            parameters={key: pb.ModelParameter(string_value=text) for key, text in config.parameters.items()},
        )
    )


def _duration(duration: Duration) -> pb.StatisticDuration:
    return pb.StatisticDuration(count=duration.count, ns=duration.ns)


def model_statistics(stats: list[ModelStats]) -> pb.ModelStatisticsResponse:
    return pb.ModelStatisticsResponse(
        model_stats=[
            pb.ModelStatistics(
                name=s.name,
                version=s.version,
                last_inference=s.last_inference,
                inference_count=s.inference_count,
                execution_count=s.execution_count,
                inference_stats=pb.InferStatistics(
                    **{name: _duration(getattr(s.requests, name)) for name in s.requests.DURATIONS}
                ),
            )
            for s in stats
        ]
    )


def repository_index(entries: list[IndexEntry]) -> pb.RepositoryIndexResponse:
    return pb.RepositoryIndexResponse(
        models=[
            pb.RepositoryIndexResponse.ModelIndex(
                name=e.name, version=e.version, state=e.state, reason=e.reason
            )
            for e in entries
        ]
    )
