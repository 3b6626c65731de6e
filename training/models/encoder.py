"""A pretrained BERT-family encoder (Hugging Face ``transformers``) with a classification head.

Reads in build order: config, the encoder rebuilt from its config dict, the head, then the
two paths. The config holds the checkpoint's whole Hugging Face config as a plain dict, so
``build_model("encoder", config)`` rebuilds the architecture with no hub access; the weights
come from checkpoint.pt (or, when fine-tuning starts, from the pretrained checkpoint:
training/text/pretrained.py). ``forward`` (what export traces) runs the written-out
("eager") attention to return every layer's weights; ``logits`` runs PyTorch's fused
scaled-dot-product kernel, which never builds them: training and scoring use it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor, nn

from attnserve.training.loop.config import FINE_TUNING
from attnserve.training.models.base import Classifier, check_inputs
from attnserve.training.models.config import ModelConfig, require
from attnserve.training.models.families import DERIVED_FIELDS, ExportHints, Family, Recipe, Trial
from attnserve.training.models.layers import masked_softmax
from attnserve.training.text.pretrained import Pretrained, load_pretrained, load_weights

if TYPE_CHECKING:
    from transformers import PreTrainedModel

ENCODER_HEADS = ("cls", "attention")
EAGER, FUSED = "eager", "sdpa"


@dataclass(frozen=True)
class EncoderConfig(ModelConfig):
    head_kinds: ClassVar[tuple[str, ...]] = ENCODER_HEADS

    vocab_size: int = 0  # rows of the encoder's embedding table; 0: the encoder config's vocab_size
    head: str = "cls"  # cls (the first token's last hidden state) | attention (learned query, masked)
    dropout: float = 0.1  # before the classifier (the encoder keeps its own dropout settings)
    encoder: dict[str, Any] = field(default_factory=dict)  # the Hugging Face config (to_dict())
    source: str = ""  # where the pretrained checkpoint came from (informational)

    def __post_init__(self) -> None:
        require(
            isinstance(self.encoder, dict) and isinstance(self.encoder.get("model_type"), str),
            "EncoderConfig.encoder must be a Hugging Face config dict with a model_type",
        )
        if self.vocab_size == 0:
            object.__setattr__(self, "vocab_size", int(self.encoder.get("vocab_size", 0)))
        super().__post_init__()
        require(
            self.vocab_size == self.encoder.get("vocab_size"),
            f"EncoderConfig.vocab_size={self.vocab_size} must equal the encoder's vocab_size "
            f"{self.encoder.get('vocab_size')}",
        )
        positions = self.encoder.get("max_position_embeddings")
        require(
            not isinstance(positions, int) or self.max_len <= positions,
            f"EncoderConfig.max_len={self.max_len} exceeds the encoder's max_position_embeddings {positions}",
        )


def build_encoder(encoder: dict[str, Any]) -> PreTrainedModel:
    """The Hugging Face base model (no task head, no pooler) of a config dict, randomly initialised."""
    from transformers import AutoConfig, AutoModel

    settings = {k: v for k, v in encoder.items() if k != "model_type"}
    hf_config = AutoConfig.for_model(str(encoder["model_type"]), **settings)
    try:
        model: PreTrainedModel = AutoModel.from_config(hf_config, attn_implementation=FUSED)
    except (ValueError, ImportError):  # a family without the fused kernel: written-out attention only
        model = AutoModel.from_config(hf_config, attn_implementation=EAGER)
    if getattr(model, "pooler", None) is not None:
        # BERT's pooler (a tanh layer trained for next-sentence prediction) is not the head here;
        # left in, it would be a parameter without gradient, which DistributedDataParallel refuses.
        model.register_module("pooler", None)
    return model


class EncoderClassifier(Classifier):
    family = "encoder"
    attention_kind = "layers"
    config_cls = EncoderConfig
    config: EncoderConfig
    encoder: PreTrainedModel

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__(config)
        self.encoder = build_encoder(config.encoder)
        width = int(self.encoder.config.hidden_size)
        self.pool_query = nn.Parameter(torch.zeros(width)) if config.head == "attention" else None  # [D]
        self.drop = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(width, config.num_classes)
        std = float(getattr(self.encoder.config, "initializer_range", 0.02))
        nn.init.normal_(self.classifier.weight, std=std)
        nn.init.zeros_(self.classifier.bias)
        if self.pool_query is not None:
            nn.init.normal_(self.pool_query, std=std)

    @contextlib.contextmanager
    def _attention(self, implementation: str) -> Iterator[None]:
        """Run the encoder's attention as ``implementation`` inside the block, then as before."""
        current = str(self.encoder.config._attn_implementation)
        if current == implementation or (implementation == FUSED and current == EAGER):
            yield
            return
        self.encoder.set_attn_implementation(implementation)
        try:
            yield
        finally:
            self.encoder.set_attn_implementation(current)

    def classify(
        self, input_ids: Tensor, attention_mask: Tensor, *, with_attention: bool
    ) -> tuple[Tensor, Tensor | None]:
        check_inputs(input_ids, attention_mask, self.config.max_len)
        mask = attention_mask.bool()  # [B, T]
        with self._attention(EAGER if with_attention else FUSED):
            out = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, output_attentions=with_attention
            )
        hidden: Tensor = out.last_hidden_state  # [B, T, D]
        if self.pool_query is not None:
            scores = hidden @ self.pool_query / math.sqrt(hidden.shape[-1])  # [B, T]
            weights = masked_softmax(scores, mask)  # [B, T], padded tokens 0
            pooled = (weights.unsqueeze(1) @ hidden).squeeze(1)  # [B, D]
        else:
            pooled = hidden[:, 0]  # [B, D]: [CLS], which the tokenizer's template puts first
        logits = self.classifier(self.drop(pooled))  # [B, C]
        if not with_attention:
            return logits, None
        attention = torch.stack(out.attentions, dim=1)  # [B, L, H, T, T]
        # Padded keys already get 0 from the additive mask; padded query rows are zeroed too.
        keep = mask[:, None, None, :, None] & mask[:, None, None, None, :]  # [B, 1, 1, T, T]
        return logits, attention * keep.to(attention.dtype)


def _space(trial: Trial) -> tuple[dict[str, Any], dict[str, Any]]:
    """What fine-tuning is sensitive to: the learning rate and batch size around the BERT
    paper's grid (2e-5 to 5e-5, batch 16 or 32, widened a little), and the head. The size is
    the checkpoint's."""
    training: dict[str, Any] = {
        "lr": trial.suggest_float("lr", 1e-5, 1e-4, log=True),
        "batch_size": trial.suggest_categorical("batch_size", [16, 32]),
    }
    return {"head": trial.suggest_categorical("head", list(ENCODER_HEADS))}, training


@dataclass(frozen=True)
class FineTuning(Pretrained):
    """A checkpoint read (training/text/pretrained.py) as the start of a fine-tuning run."""

    def build(self, *, num_classes: int, max_len: int, **settings: Any) -> EncoderClassifier:
        """The classifier with the checkpoint's encoder weights and a freshly initialised head."""
        cfg = EncoderConfig(
            num_classes=num_classes,
            max_len=max_len,
            pad_id=self.pad_id,
            encoder=self.encoder,
            source=self.source,
            **settings,
        )
        model = EncoderClassifier(cfg)
        load_weights(model.encoder, self.folder)
        return model


def fine_tuning(source: str) -> FineTuning:
    """--pretrained SOURCE read, ready to build on."""
    read = load_pretrained(source)
    return FineTuning(**{f.name: getattr(read, f.name) for f in dataclasses.fields(read)})


def _fusion_shape(config: ModelConfig) -> tuple[int, int]:
    from transformers import AutoConfig

    assert isinstance(config, EncoderConfig)
    # Through the config class: some families name these fields their own way (DistilBERT's
    # n_heads and dim), which the class maps to the usual names.
    settings = {k: v for k, v in config.encoder.items() if k != "model_type"}
    hf_config = AutoConfig.for_model(str(config.encoder["model_type"]), **settings)
    return int(hf_config.num_attention_heads), int(hf_config.hidden_size)


FAMILY = Family(
    EncoderClassifier.family,
    EncoderClassifier,
    search=_space,
    recipe=Recipe(training=FINE_TUNING, planned=False),  # the checkpoint's size, the BERT paper's recipe
    # BERT-sized graphs: a logits-only graph for calls without attention, int8 per output column
    # (per tensor lost accuracy: docs/results/encoder.md), and the transformer fusions.
    export=ExportHints(label_graph=True, per_channel_int8=True, fusion_shape=_fusion_shape),
    checkpoint=fine_tuning,
    derived=DERIVED_FIELDS | {"encoder", "source"},
    stand_in={"encoder": {"model_type": "bert", "vocab_size": 8}},
)
