"""What a served model version is, as every front end describes it (attnserve.v1
`GetModel`/`ListModels` and the HTTP JSON API's `/v1/models`): plain values, no wire format."""

from __future__ import annotations

from dataclasses import dataclass

from attnserve.service.engine.core import Core
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.request.attention import AttentionMode, mode_shapes


@dataclass(frozen=True, slots=True)
class Limits:
    max_texts_per_request: int
    max_text_chars: int
    max_batch_size: int
    max_batch_tokens: int
    long_text: str


@dataclass(frozen=True, slots=True)
class ModelInfo:
    name: str
    version: int
    versions: list[int]
    family: str
    labels: list[str]
    max_len: int
    attention_kind: str
    layers: int
    heads: int
    shapes: dict[AttentionMode, str]  # per supported mode, n standing for a text's tokens
    limits: Limits
    provider: str
    metrics: dict[str, float]  # "<split>.<metric>" from training
    created_at: str  # ISO 8601


def model_info(core: Core, model: LoadedModel) -> ModelInfo:
    manifest = model.manifest
    spec = manifest.attention
    settings = core.settings
    entry = core.repository.models.get(model.name)
    metrics = {
        f"{split}.{key}": float(value)
        for split, values in manifest.training_metrics.items()
        if isinstance(values, dict)
        for key, value in values.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }
    return ModelInfo(
        name=model.name,
        version=model.version,
        versions=sorted(entry.versions) if entry else [model.version],
        family=manifest.family,
        labels=list(manifest.labels),
        max_len=manifest.max_len,
        attention_kind=spec.kind,
        layers=spec.layers,
        heads=spec.heads,
        shapes=mode_shapes(spec.kind, spec.layers, spec.heads),
        limits=Limits(
            max_texts_per_request=settings.max_texts_per_request,
            max_text_chars=settings.max_text_chars,
            max_batch_size=settings.max_batch_size,
            max_batch_tokens=settings.max_batch_tokens,
            long_text=settings.long_text,
        ),
        provider=model.provider,
        metrics=metrics,
        created_at=manifest.created_at.isoformat(),
    )


def mode_name(mode: AttentionMode) -> str:
    """The attnserve.v1 enum name of a mode, as replies spell it."""
    return f"ATTENTION_MODE_{mode.name}"
