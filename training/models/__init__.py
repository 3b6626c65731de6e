"""Classifier families and their registry: rebuild any model from (family, config dict).

A family is its module (its config, classifier and ``FAMILY``: training/models/families.py)
plus its line in ``REGISTRY``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from attnserve.training.models import (
    attention_pool,
    bow_mlp,
    conv_attention,
    encoder,
    gru_attention,
    mean_pool,
    self_attention,
    transformer,
)
from attnserve.training.models.attention_pool import AttentionPoolClassifier, AttentionPoolConfig
from attnserve.training.models.base import Classifier
from attnserve.training.models.bow_mlp import BowMLPClassifier, BowMLPConfig
from attnserve.training.models.config import ModelConfig
from attnserve.training.models.conv_attention import ConvAttentionClassifier, ConvAttentionConfig
from attnserve.training.models.encoder import EncoderClassifier, EncoderConfig
from attnserve.training.models.families import Family, registry
from attnserve.training.models.gru_attention import GRUAttentionClassifier, GRUAttentionConfig
from attnserve.training.models.mean_pool import MeanPoolClassifier, MeanPoolConfig
from attnserve.training.models.self_attention import SelfAttentionClassifier, SelfAttentionConfig
from attnserve.training.models.transformer import TransformerClassifier, TransformerConfig

REGISTRY: dict[str, Family] = registry(
    mean_pool.FAMILY,
    attention_pool.FAMILY,
    self_attention.FAMILY,
    transformer.FAMILY,
    bow_mlp.FAMILY,
    conv_attention.FAMILY,
    gru_attention.FAMILY,
    encoder.FAMILY,
)
FAMILIES: dict[str, type[Classifier]] = {name: family.model for name, family in REGISTRY.items()}


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
    "REGISTRY",
    "AttentionPoolClassifier",
    "AttentionPoolConfig",
    "BowMLPClassifier",
    "BowMLPConfig",
    "Classifier",
    "ConvAttentionClassifier",
    "ConvAttentionConfig",
    "EncoderClassifier",
    "EncoderConfig",
    "Family",
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
