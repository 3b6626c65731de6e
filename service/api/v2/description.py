"""How a served model describes itself on the V2 protocol: its metadata (the tensor contract
of contract.py) and Triton's model configuration, with what its scores mean as the
configuration's string parameters."""

from __future__ import annotations

from collections.abc import Iterable

from attnserve.service.api.v2.contract import INPUTS, outputs_of
from attnserve.service.api.v2.types import ConfigTensor, ModelConfig, ModelMetadata
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.settings import Settings

PLATFORM = "onnxruntime_onnx"
BACKEND = "onnxruntime"
_CONFIG_TYPES = {"BYTES": "TYPE_STRING", "INT64": "TYPE_INT64", "INT32": "TYPE_INT32", "FP32": "TYPE_FP32",
                 "BOOL": "TYPE_BOOL"}  # fmt: skip


def metadata(model: LoadedModel, versions: Iterable[int]) -> ModelMetadata:
    return ModelMetadata(
        name=model.name,
        versions=[str(v) for v in sorted(versions)],
        platform=PLATFORM,
        inputs=INPUTS,
        outputs=outputs_of(model),
    )


def config(model: LoadedModel, settings: Settings) -> ModelConfig:
    """Triton's view of the model; dims leave out the batch dimension (max_batch_size > 0)."""
    # Both input forms are optional: a request carries TEXT or INPUT_IDS + ATTENTION_MASK.
    inputs = tuple(
        ConfigTensor(d.name, _CONFIG_TYPES[d.datatype], d.shape[1:], optional=True) for d in INPUTS
    )
    outputs = tuple(
        # A tensor of shape [-1] is dims [1] reshaped to [] (present but empty).
        ConfigTensor(d.name, _CONFIG_TYPES[d.datatype], d.shape[1:] or (1,), reshape=not d.shape[1:])
        for d in outputs_of(model)
    )
    return ModelConfig(
        name=model.name,
        platform=PLATFORM,
        backend=BACKEND,
        max_batch_size=settings.max_texts_per_request,
        inputs=inputs,
        outputs=outputs,
        preferred_batch_size=settings.max_batch_size,
        max_queue_delay_microseconds=int(settings.max_delay_ms * 1000),
        parameters=scoring_parameters(model),
    )


def scoring_parameters(model: LoadedModel) -> dict[str, str]:
    """What the model's scores mean, as the configuration's string parameters."""
    scoring = model.scoring
    parameters = {"problem_type": scoring.problem.value}
    if scoring.thresholds is not None:
        parameters["thresholds"] = ",".join(str(t) for t in scoring.thresholds)  # exact round trip
    return parameters
