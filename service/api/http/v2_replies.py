"""V2 REST replies other than inference: metadata, configuration, statistics and the
repository index, from the data plane's types, as Triton's REST replies show them (field
names as in the protocol, 64-bit integers as JSON numbers, enums by name, every field
present even at its default)."""

from __future__ import annotations

from typing import Any

from attnserve.service.api.v2.types import (
    ConfigTensor,
    IndexEntry,
    ModelConfig,
    ModelMetadata,
    ModelStats,
    TensorDecl,
)


def _decls(decls: tuple[TensorDecl, ...]) -> list[dict[str, Any]]:
    return [{"name": d.name, "datatype": d.datatype, "shape": list(d.shape)} for d in decls]


def model_metadata(metadata: ModelMetadata) -> dict[str, Any]:
    return {
        "name": metadata.name,
        "versions": metadata.versions,
        "platform": metadata.platform,
        "inputs": _decls(metadata.inputs),
        "outputs": _decls(metadata.outputs),
    }


def _config_tensor(tensor: ConfigTensor, *, output: bool) -> dict[str, Any]:
    item: dict[str, Any] = {"name": tensor.name, "data_type": tensor.data_type, "dims": list(tensor.dims)}
    if output:
        if tensor.reshape:
            item["reshape"] = {"shape": []}
    else:
        item["optional"] = tensor.optional
    return item


def model_config(config: ModelConfig) -> dict[str, Any]:
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
    }


def model_statistics(stats: list[ModelStats]) -> dict[str, Any]:
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
                    name: {"count": getattr(s.requests, name).count, "ns": getattr(s.requests, name).ns}
                    for name in s.requests.DURATIONS
                },
            }
            for s in stats
        ]
    }


def repository_index(entries: list[IndexEntry]) -> list[dict[str, Any]]:
    """A bare list, as Triton answers."""
    return [{"name": e.name, "version": e.version, "state": e.state, "reason": e.reason} for e in entries]
