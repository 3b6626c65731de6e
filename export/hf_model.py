"""A transformers sequence classifier as an attnserve ``Classifier``: logits and every layer's attention.

The model is ``AutoModelForSequenceClassification`` itself, loaded from the folder in eval
mode with the written-out ("eager") attention, the one implementation that returns the
weights; ``forward`` is its forward with ``output_attentions=True``, the layers stacked to
``[B, L, H, T, T]`` and padded query rows zeroed (padded keys are 0 already), as the encoder
family gives them. So export, parity, golden cases and the gates run on transformers'
own computation, head included (BERT's pooler, RoBERTa's two-layer head, ...). It carries an
``EncoderConfig`` and the encoder family's name: the bundle is an encoder bundle, with its
label graph, int8 per channel and transformer fusions. The logits are the head's outputs
whatever they mean (scores of a softmax, of sigmoids, or a regression's one value): export
proves the graph computes them, the bundle's ``scoring`` says how they are served.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from attnserve.export.errors import ExportRequestError
from attnserve.training.models.base import Classifier, check_inputs
from attnserve.training.models.encoder import EAGER, EncoderClassifier, EncoderConfig
from attnserve.training.text.pretrained import OFFSET_POSITIONS

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class ImportedConfig(EncoderConfig):
    """An ``EncoderConfig`` whose head may have one output: a regression model trained elsewhere.
    Training's rule of two classes or more is about what it trains, not what it imports."""

    def require_at_least(self, minimum: int, *names: str) -> None:
        if "num_classes" in names:
            super().require_at_least(1, "num_classes")
            names = tuple(name for name in names if name != "num_classes")
        super().require_at_least(minimum, *names)


class TransformersClassifier(Classifier):
    family = EncoderClassifier.family
    attention_kind = EncoderClassifier.attention_kind
    config_cls = EncoderConfig
    config: EncoderConfig

    def __init__(self, config: EncoderConfig, model: PreTrainedModel) -> None:
        super().__init__(config)
        self.model = model

    def classify(
        self, input_ids: Tensor, attention_mask: Tensor, *, with_attention: bool
    ) -> tuple[Tensor, Tensor | None]:
        check_inputs(input_ids, attention_mask, self.config.max_len)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, output_attentions=with_attention)
        logits: Tensor = out.logits  # [B, C]
        if not with_attention:
            return logits, None
        attention = torch.stack(out.attentions, dim=1)  # [B, L, H, T, T]
        mask = attention_mask.bool()  # [B, T]
        keep = mask[:, None, None, :, None] & mask[:, None, None, None, :]  # [B, 1, 1, T, T]
        return logits, attention * keep.to(attention.dtype)


def choose_max_len(
    model_type: str, max_position_embeddings: int, tokenizer_limit: int | None, requested: int | None
) -> int:
    """``requested`` (--max-len) if the model can read it, else the longest input both the
    position table (RoBERTa's layout starts after the pad id) and the tokenizer allow."""
    limit = max_position_embeddings - (2 if model_type in OFFSET_POSITIONS else 0)
    if requested is None:
        return min(limit, tokenizer_limit) if tokenizer_limit is not None else limit
    if not 1 <= requested <= limit:
        raise ExportRequestError(f"--max-len {requested}: the model reads 1 to {limit} tokens")
    return requested


def load_classifier(folder: Path, *, model_type: str, max_len: int, pad_id: int) -> TransformersClassifier:
    """The folder's classifier, every weight from the folder (a missing one is an error, not a
    random initialisation), reading up to ``max_len`` tokens and padded with ``pad_id``."""
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar per load fills a log
    try:
        model, info = AutoModelForSequenceClassification.from_pretrained(
            str(folder),
            local_files_only=True,
            trust_remote_code=False,
            attn_implementation=EAGER,
            output_loading_info=True,
        )
    except (OSError, ValueError, RuntimeError, KeyError, ImportError) as exc:
        raise ExportRequestError(
            f"{folder}: transformers cannot load the model: {' '.join(str(exc).split())}"
        ) from exc
    missing = sorted(info.get("missing_keys") or ())
    mismatched = sorted(str(key) for key in info.get("mismatched_keys") or ())
    if missing or mismatched:
        example = (missing or mismatched)[0]
        raise ExportRequestError(
            f"{folder}: the weights do not fit config.json ({len(missing)} missing, {len(mismatched)} of "
            f"another shape, e.g. {example}); transformers would fill them with random numbers"
        )
    model = model.float().eval()  # float32 whatever dtype the weights were saved in
    hf = model.config
    encoder = dict(hf.to_dict())
    encoder["model_type"] = model_type
    config = ImportedConfig(
        vocab_size=int(hf.vocab_size),
        num_classes=int(hf.num_labels),
        max_len=max_len,
        pad_id=pad_id,
        dropout=0.0,  # unused: the model's own head runs (in eval mode)
        encoder=encoder,
        source=str(folder),
    )
    return TransformersClassifier(config, model).eval()
