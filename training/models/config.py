"""Model configs: the fields every family has, and those of the families that read a sequence.

Configs arrive from checkpoints and command lines, so they check types as well as values and
fail with a message naming the field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

HEADS = ("linear", "cosine")
POSITIONS = ("none", "learned", "sinusoidal")

# Field annotation -> accepted Python types (an int is a valid float; a bool is not an int here).
_SCALARS: dict[str, tuple[type[Any], ...]] = {
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "bool": (bool,),
}


def require(condition: bool, message: str) -> None:
    """Raise ValueError(message) unless condition holds (config validation)."""
    if not condition:
        raise ValueError(message)


@dataclass(frozen=True)
class ModelConfig:
    """Fields every family has. Subclasses add their own, all with defaults."""

    # Head kinds a family accepts; the pretrained encoder has its own.
    head_kinds: ClassVar[tuple[str, ...]] = HEADS

    vocab_size: int
    num_classes: int = 2
    max_len: int = 64
    pad_id: int = 0
    head: str = "linear"  # linear | cosine
    dropout: float = 0.1

    def __post_init__(self) -> None:
        name = type(self).__name__
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            allowed = _SCALARS.get(str(f.type))
            if allowed is None:
                continue
            if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
                raise ValueError(f"{name}.{f.name} must be {f.type}, got {value!r}")
            if f.type == "float":
                object.__setattr__(self, f.name, float(value))
        self.require_at_least(2, "vocab_size", "num_classes")
        self.require_at_least(1, "max_len")
        require(
            0 <= self.pad_id < self.vocab_size,
            f"{name}.pad_id must be in [0, vocab_size={self.vocab_size}), got {self.pad_id}",
        )
        self.require_choice("head", self.head_kinds)
        require(0.0 <= self.dropout < 1.0, f"{name}.dropout must be in [0, 1), got {self.dropout}")

    def require_at_least(self, minimum: int, *names: str) -> None:
        for field in names:
            value = getattr(self, field)
            require(value >= minimum, f"{type(self).__name__}.{field} must be >= {minimum}, got {value}")

    def require_positive(self, *names: str) -> None:
        for field in names:
            value = getattr(self, field)
            require(value > 0, f"{type(self).__name__}.{field} must be > 0, got {value}")

    def require_choice(self, field: str, choices: tuple[str, ...]) -> None:
        value = getattr(self, field)
        require(value in choices, f"{type(self).__name__}.{field} must be one of {choices}, got {value!r}")


@dataclass(frozen=True)
class SequenceConfig(ModelConfig):
    """Fields of the families that embed each token as a ``d_model``-wide vector plus a position."""

    # Position kinds a family accepts; a family that must see word order narrows it.
    position_kinds: ClassVar[tuple[str, ...]] = POSITIONS

    d_model: int = 64
    positions: str = "learned"  # none | learned | sinusoidal
    ngram_buckets: int = 0  # hashed bigram embeddings added to the pooled vector (0: none)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_at_least(1, "d_model")
        self.require_at_least(0, "ngram_buckets")
        self.require_choice("positions", self.position_kinds)
