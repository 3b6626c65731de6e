"""The classifier interface, and the front end and head every sequence family shares.

A sequence family reads top to bottom as: config, ``build`` (its own layers), ``features``
(token vectors -> one vector per text). Embedding, positions, dropout, the input checks and
the head live here, once.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from attnserve.training.models.config import ModelConfig, SequenceConfig
from attnserve.training.models.init import init_weights
from attnserve.training.models.layers import NgramBag, PositionalEncoding, make_head


def check_inputs(input_ids: Tensor, attention_mask: Tensor, max_len: int) -> None:
    """Reject inputs the model cannot read.

    Python-side only: during ONNX export it checks the example inputs and leaves nothing in
    the graph, so whoever feeds an exported model must enforce max_len itself.
    """
    if input_ids.dim() != 2 or input_ids.shape != attention_mask.shape:
        raise ValueError(
            "input_ids and attention_mask must both be [batch, sequence]; got "
            f"{tuple(input_ids.shape)} and {tuple(attention_mask.shape)}"
        )
    if input_ids.shape[1] > max_len:
        raise ValueError(
            f"sequence length {input_ids.shape[1]} exceeds max_len {max_len}; "
            f"truncate inputs to at most {max_len} tokens"
        )


class Classifier(nn.Module):
    """Base of every family: ``forward(input_ids, attention_mask) -> (logits, attention)``.

    input_ids and attention_mask are int [B, T] (mask 1 = real token, right padding);
    logits are [B, C]; attention's shape depends on ``attention_kind``:
    pool [B, T], self [B, T, T], layers [B, L, H, T, T], none -> None.
    ``forward`` is what export traces. Training and scoring need only ``logits``, which lets
    attention layers use a fused kernel that never builds the weights.
    """

    family: ClassVar[str]
    attention_kind: ClassVar[str]
    config_cls: ClassVar[type[ModelConfig]]

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if not isinstance(config, self.config_cls):
            raise TypeError(f"{type(self).__name__} needs a {self.config_cls.__name__}, got {config!r}")
        self.config = config

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor | None]:
        return self.classify(input_ids, attention_mask, with_attention=True)

    def logits(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """The same logits as ``forward``, without attention weights."""
        return self.classify(input_ids, attention_mask, with_attention=False)[0]

    def classify(
        self, input_ids: Tensor, attention_mask: Tensor, *, with_attention: bool
    ) -> tuple[Tensor, Tensor | None]:
        """Logits [B, C], and the attention when ``with_attention`` (else None)."""
        raise NotImplementedError


class SequenceClassifier(Classifier):
    """token ids -> embedding + positions -> dropout -> ``features`` (+ bigram bag) -> head.

    Modules are created in that order, so registration order (and with it which random draws
    each parameter gets from a seed) follows the data flow.
    """

    config: SequenceConfig

    def __init__(self, config: SequenceConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = PositionalEncoding(config.positions, config.max_len, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.build()
        self.ngrams = NgramBag(config.ngram_buckets, config.d_model) if config.ngram_buckets else None
        self.head = make_head(config.head, config.d_model, config.num_classes)
        self.reset_weights()

    def build(self) -> None:
        """Create the family's own layers (between the front end and the head)."""
        raise NotImplementedError

    def reset_weights(self) -> None:
        """Initial weights, once every module exists; families may choose another scheme."""
        self.apply(init_weights)

    def features(self, x: Tensor, mask: Tensor, with_attention: bool) -> tuple[Tensor, Tensor | None]:
        """Token vectors x [B, T, D] and bool mask [B, T] -> one vector per text [B, D], attention."""
        raise NotImplementedError

    def classify(
        self, input_ids: Tensor, attention_mask: Tensor, *, with_attention: bool
    ) -> tuple[Tensor, Tensor | None]:
        check_inputs(input_ids, attention_mask, self.config.max_len)
        mask = attention_mask.bool()  # [B, T]
        x = self.drop(self.positions(self.embed(input_ids)))  # [B, T, D]
        pooled, attention = self.features(x, mask, with_attention)  # [B, D], attention or None
        if self.ngrams is not None:
            pooled = pooled + self.drop(self.ngrams(input_ids, mask))  # [B, D]
        return self.head(pooled), attention if with_attention else None  # [B, C]
