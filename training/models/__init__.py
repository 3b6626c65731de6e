"""Classifier families and their registry: rebuild any model from (family, config dict)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from attnserve.training.models.attention_pool import AttentionPoolClassifier, AttentionPoolConfig
from attnserve.training.models.base import Classifier
from attnserve.training.models.bow_mlp import BowMLPClassifier, BowMLPConfig
from attnserve.training.models.config import ModelConfig
from attnserve.training.models.conv_attention import ConvAttentionClassifier, ConvAttentionConfig
from attnserve.training.models.encoder import EncoderClassifier, EncoderConfig
from attnserve.training.models.gru_attention import GRUAttentionClassifier, GRUAttentionConfig
from attnserve.training.models.mean_pool import MeanPoolClassifier, MeanPoolConfig
from attnserve.training.models.self_attention import SelfAttentionClassifier, SelfAttentionConfig
from attnserve.training.models.transformer import TransformerClassifier, TransformerConfig

FAMILIES: dict[str, type[Classifier]] = {
    cls.family: cls
    for cls in (
        MeanPoolClassifier,
        AttentionPoolClassifier,
        SelfAttentionClassifier,
        TransformerClassifier,
        BowMLPClassifier,
        ConvAttentionClassifier,
        GRUAttentionClassifier,
        EncoderClassifier,
    )
}


def build_model(family: str, config: Mapping[str, Any]) -> Classifier:
    """Construct ``family`` from a plain config dict (as saved in a checkpoint)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; known families: {', '.join(FAMILIES)}")
    cls = FAMILIES[family]
    fields = dataclasses.fields(cls.config_cls)
    known = {f.name for f in fields}
    unknown = sorted(set(config) - known)
    if unknown:
        raise ValueError(f"unknown config field(s) for {family}: {unknown}; known fields: {sorted(known)}")
    required = {f.name for f in fields if f.default is dataclasses.MISSING}
    missing = sorted(required - set(config))
    if missing:
        raise ValueError(f"missing required config field(s) for {family}: {missing}")
    return cls(cls.config_cls(**config))


def config_to_dict(config: ModelConfig) -> dict[str, Any]:
    """The plain-dict form of a config, which ``build_model`` accepts back."""
    return dataclasses.asdict(config)


__all__ = [
    "FAMILIES",
    "AttentionPoolClassifier",
    "AttentionPoolConfig",
    "BowMLPClassifier",
    "BowMLPConfig",
    "Classifier",
    "ConvAttentionClassifier",
    "ConvAttentionConfig",
    "EncoderClassifier",
    "EncoderConfig",
    "GRUAttentionClassifier",
    "GRUAttentionConfig",
    "MeanPoolClassifier",
    "MeanPoolConfig",
    "ModelConfig",
    "SelfAttentionClassifier",
    "SelfAttentionConfig",
    "TransformerClassifier",
    "TransformerConfig",
    "build_model",
    "config_to_dict",
]
