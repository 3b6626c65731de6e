"""How a served model looks on the V2 protocol: its tensors, metadata and configuration.

Every model has the same tensor contract (only the class count and the attention rank
vary), with a leading batch dimension of up to `max_texts_per_request` texts:

    inputs   TEXT            BYTES  [-1, 1]       tokenized by the server, or
             INPUT_IDS       INT64  [-1, -1]      ids from the bundle's tokenizer, right-padded,
             ATTENTION_MASK  INT64  [-1, -1]      1 on each text's tokens, 0 on padding
    outputs  LOGITS          FP32   [-1, C]
             PROBABILITIES   FP32   [-1, C]
             LABEL           BYTES  [-1, 1]
             ATTENTION       FP32   [-1, -1] (pooling models) or [-1, -1, -1] (encoders: the
                                    last layer averaged over heads), padded with zeros to the
                                    request's longest text; absent for models without attention
             LENGTHS         INT64  [-1]          tokens per text (the unpadded extent of ATTENTION)

The declared ATTENTION shape is the default mode's. A request may pick another mode with the
`attention_mode` parameter (on the ATTENTION output, or on the request: tritonclient sets no
parameters per output); `last_layer` [B, H, T, T] and `all` [B, L, H, T, T] change the rank,
which the protocol's metadata cannot declare.
"""

from __future__ import annotations

from collections.abc import Iterable

from attnserve.service.api.v2.types import ConfigTensor, ModelConfig, ModelMetadata, TensorDecl
from attnserve.service.edges import quote
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.request.attention import AttentionMode
from attnserve.service.errors import InvalidArgument
from attnserve.service.settings import Settings

PLATFORM = "onnxruntime_onnx"
BACKEND = "onnxruntime"
TEXT, INPUT_IDS, ATTENTION_MASK = "TEXT", "INPUT_IDS", "ATTENTION_MASK"
LOGITS, PROBABILITIES, LABEL, ATTENTION, LENGTHS = "LOGITS", "PROBABILITIES", "LABEL", "ATTENTION", "LENGTHS"

_CONFIG_TYPES = {"BYTES": "TYPE_STRING", "INT64": "TYPE_INT64", "FP32": "TYPE_FP32"}

# The ATTENTION output's modes, by the name the `attention_mode` parameter gives (the JSON
# API's names); leaving ATTENTION out of the request is mode NONE.
ATTENTION_MODE = "attention_mode"
ATTENTION_MODES: dict[str, AttentionMode] = {
    mode.name.lower(): mode for mode in AttentionMode if mode != AttentionMode.NONE
}


def parse_attention_mode(value: object, where: str) -> AttentionMode:
    """An `attention_mode` parameter's value (a string) as its mode."""
    mode = ATTENTION_MODES.get(value) if isinstance(value, str) else None
    if mode is None:
        raise InvalidArgument(
            f"{where}: {quote(value, 32)} is not an attention mode; use one of the strings "
            f"{', '.join(ATTENTION_MODES)}"
        )
    return mode


def mode_name(mode: AttentionMode) -> str:
    return mode.name.lower()


INPUTS = (
    TensorDecl(TEXT, "BYTES", (-1, 1)),
    TensorDecl(INPUT_IDS, "INT64", (-1, -1)),
    TensorDecl(ATTENTION_MASK, "INT64", (-1, -1)),
)
INPUT_DECLS = {decl.name: decl for decl in INPUTS}


def outputs_of(model: LoadedModel) -> tuple[TensorDecl, ...]:
    classes = len(model.labels)
    declared = [
        TensorDecl(LOGITS, "FP32", (-1, classes)),
        TensorDecl(PROBABILITIES, "FP32", (-1, classes)),
        TensorDecl(LABEL, "BYTES", (-1, 1)),
    ]
    if model.attention_kind == "pool":
        declared.append(TensorDecl(ATTENTION, "FP32", (-1, -1)))
    elif model.attention_kind != "none":
        declared.append(TensorDecl(ATTENTION, "FP32", (-1, -1, -1)))
    declared.append(TensorDecl(LENGTHS, "INT64", (-1,)))
    return tuple(declared)


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
    )
