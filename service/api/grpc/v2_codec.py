"""The gRPC V2 adapter's replies besides inference: server and model metadata, model
configuration, statistics and the repository index, from the V2 plane's types.

Inference requests and replies are converted where they are served (v2.py), next to the
handler that reads the message once and writes its reply once.
"""

from __future__ import annotations

from attnserve.service.api.v2.types import (
    ConfigTensor,
    Duration,
    IndexEntry,
    ModelConfig,
    ModelMetadata,
    ModelStats,
    ServerMetadata,
    TensorDecl,
)
from attnserve.service.proto.inference import grpc_service_pb2 as pb

_CONFIG_TYPES = {
    "TYPE_STRING": pb.TYPE_STRING,
    "TYPE_INT64": pb.TYPE_INT64,
    "TYPE_INT32": pb.TYPE_INT32,
    "TYPE_FP32": pb.TYPE_FP32,
    "TYPE_BOOL": pb.TYPE_BOOL,
}


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
