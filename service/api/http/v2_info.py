"""The V2 REST information replies (model metadata, configuration, statistics, repository
index) in Triton's JSON form: field names as in the protocol, 64-bit integers as JSON
numbers, enums by name, every field present even at its default.

Each form is a typed dict: what a route writes is checked against it by the type checker,
and the OpenAPI document (openapi.py) describes the same dicts, so the two cannot drift
apart and the HTTP side needs no protobuf to describe Triton's messages.
"""

from __future__ import annotations

from typing import Literal, NotRequired, cast

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

from attnserve.service.api.v2.types import (
    ConfigTensor,
    Duration,
    IndexEntry,
    ModelConfig,
    ModelMetadata,
    ModelStats,
    TensorDecl,
)

CLOSED = ConfigDict(extra="forbid")  # a reply holds the fields its form names, no others
DataType = Literal["TYPE_STRING", "TYPE_INT64", "TYPE_INT32", "TYPE_FP32"]


@with_config(CLOSED)
class TensorMetadataJson(TypedDict):
    name: str
    datatype: str
    shape: list[int]


@with_config(CLOSED)
class ModelMetadataJson(TypedDict):
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadataJson]
    outputs: list[TensorMetadataJson]


@with_config(CLOSED)
class ReshapeJson(TypedDict):
    shape: list[int]


@with_config(CLOSED)
class ConfigTensorJson(TypedDict):
    name: str
    data_type: DataType
    dims: list[int]
    optional: NotRequired[bool]  # inputs only
    reshape: NotRequired[ReshapeJson]  # outputs given as dims [1] for shape [-1]


@with_config(CLOSED)
class DynamicBatchingJson(TypedDict):
    preferred_batch_size: list[int]
    max_queue_delay_microseconds: int
    preserve_ordering: bool


@with_config(CLOSED)
class ParameterJson(TypedDict):
    string_value: str


@with_config(CLOSED)
class ModelConfigJson(TypedDict):
    name: str
    platform: str
    backend: str
    max_batch_size: int
    input: list[ConfigTensorJson]
    output: list[ConfigTensorJson]
    dynamic_batching: DynamicBatchingJson
    parameters: dict[str, ParameterJson]


@with_config(CLOSED)
class DurationJson(TypedDict):
    count: int
    ns: int


@with_config(CLOSED)
class InferStatsJson(TypedDict):
    success: DurationJson
    fail: DurationJson
    queue: DurationJson
    compute_input: DurationJson
    compute_infer: DurationJson
    compute_output: DurationJson


@with_config(CLOSED)
class ModelStatJson(TypedDict):
    name: str
    version: str
    last_inference: int
    inference_count: int
    execution_count: int
    batch_stats: list[object]  # always empty: the server keeps no per-batch-size statistics
    inference_stats: InferStatsJson


@with_config(CLOSED)
class ModelStatisticsJson(TypedDict):
    model_stats: list[ModelStatJson]


@with_config(CLOSED)
class IndexEntryJson(TypedDict):
    name: str
    version: str
    state: str
    reason: str


def _decls(decls: tuple[TensorDecl, ...]) -> list[TensorMetadataJson]:
    return [{"name": d.name, "datatype": d.datatype, "shape": list(d.shape)} for d in decls]


def model_metadata(metadata: ModelMetadata) -> ModelMetadataJson:
    return {
        "name": metadata.name,
        "versions": list(metadata.versions),
        "platform": metadata.platform,
        "inputs": _decls(metadata.inputs),
        "outputs": _decls(metadata.outputs),
    }


def _config_tensor(tensor: ConfigTensor, *, output: bool) -> ConfigTensorJson:
    data_type = cast(DataType, tensor.data_type)  # one of the contract's types
    item: ConfigTensorJson = {"name": tensor.name, "data_type": data_type, "dims": list(tensor.dims)}
    if output:
        if tensor.reshape:
            item["reshape"] = {"shape": []}
    else:
        item["optional"] = tensor.optional
    return item


def model_config(config: ModelConfig) -> ModelConfigJson:
    return {
        "name": config.name,
        "platform": config.platform,
        "backend": config.backend,
        "max_batch_size": config.max_batch_size,
        "input": [_config_tensor(t, output=False) for t in config.inputs],
        "output": [_config_tensor(t, output=True) for t in config.outputs],
        "dynamic_batching": {
            "preferred_batch_size": [config.preferred_batch_size],
            "max_queue_delay_microseconds": config.max_queue_delay_microseconds,
            "preserve_ordering": True,
        },
        "parameters": {key: {"string_value": value} for key, value in config.parameters.items()},
    }


def _duration(duration: Duration) -> DurationJson:
    return {"count": duration.count, "ns": duration.ns}


def model_statistics(stats: list[ModelStats]) -> ModelStatisticsJson:
    return {
        "model_stats": [
            {
                "name": s.name,
                "version": s.version,
                "last_inference": s.last_inference,
                "inference_count": s.inference_count,
                "execution_count": s.execution_count,
                "batch_stats": [],
                "inference_stats": {
                    "success": _duration(s.requests.success),
                    "fail": _duration(s.requests.fail),
                    "queue": _duration(s.requests.queue),
                    "compute_input": _duration(s.requests.compute_input),
                    "compute_infer": _duration(s.requests.compute_infer),
                    "compute_output": _duration(s.requests.compute_output),
                },
            }
            for s in stats
        ]
    }


def repository_index(entries: list[IndexEntry]) -> list[IndexEntryJson]:
    """A bare list, as Triton answers."""
    return [{"name": e.name, "version": e.version, "state": e.state, "reason": e.reason} for e in entries]
