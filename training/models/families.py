"""What a family owns besides its layers: where its tokenizer comes from, its recipe, its
search space, how it encodes texts and what export does with it.

Each family's module defines its ``FAMILY``; ``training.models`` registers them. Code outside
a family asks its ``Family`` instead of testing the family's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from attnserve.training.data import encoding
from attnserve.training.data.core import DataError
from attnserve.training.models.base import Classifier
from attnserve.training.models.config import ModelConfig

if TYPE_CHECKING:
    from tokenizers import Tokenizer

# Fields every family's config derives from the data or the tokenizer, never set by a flag.
DERIVED_FIELDS = frozenset({"vocab_size", "num_classes", "max_len", "pad_id"})
SEQUENCE_WIDTHS = (32, 64, 128)


class FamilyError(DataError):
    """A family asked for with a start it cannot have (a checkpoint, or none)."""


class Trial(Protocol):
    """The draws a search space makes (an ``optuna.Trial``)."""

    def suggest_float(self, name: str, low: float, high: float, *, log: bool = False) -> float: ...

    def suggest_int(self, name: str, low: int, high: int) -> int: ...

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any: ...


# One point of a family's search space: (model config fields, TrainConfig fields).
Space = Callable[[Trial], tuple[dict[str, Any], dict[str, Any]]]


class Checkpoint(Protocol):
    """A pretrained start: its own tokenizer (copied into the run) and its weights."""

    @property
    def source(self) -> str: ...  # what --pretrained named

    @property
    def tokenizer_path(self) -> Path: ...

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def max_positions(self) -> int: ...  # the longest input its position table allows

    def build(self, *, num_classes: int, max_len: int, **settings: Any) -> Classifier: ...


@dataclass(frozen=True)
class Recipe:
    """The trainer settings a family brings, under the flags given."""

    # (TrainConfig field, value); None: the data's recipe or the built-in task's.
    training: tuple[tuple[str, Any], ...] | None = None
    planned: bool = True  # --data plans the width, dropout and steps from the data's size


@dataclass(frozen=True)
class ExportHints:
    """What export does differently for a family's bundles."""

    label_graph: bool = False  # a second, logits-only graph beside model.onnx
    per_channel_int8: bool = False  # int8 with a scale per output column, not per tensor
    # (heads, width) for onnxruntime's transformer fusions under --optimize; None: none apply
    fusion_shape: Callable[[ModelConfig], tuple[int, int]] | None = None


@dataclass(frozen=True)
class Family:
    """A family's parts: its classifier and what the stages do differently for it."""

    name: str
    model: type[Classifier]
    search: Space
    recipe: Recipe = Recipe()
    export: ExportHints = ExportHints()
    # Loads --pretrained; None: the tokenizer is learnt from the training texts.
    checkpoint: Callable[[str], Checkpoint] | None = None
    derived: frozenset[str] = DERIVED_FIELDS  # config fields no flag sets
    # Config values standing in for a checkpoint's while the flags are checked, before loading it.
    stand_in: Mapping[str, Any] = field(default_factory=dict)

    def tokenizer_source(self, pretrained: str | None) -> Checkpoint | None:
        """The checkpoint whose tokenizer and weights the run starts from; None: learnt from
        the data. Checked before any data is read."""
        check_start(self, pretrained)
        return None if self.checkpoint is None else self.checkpoint(str(pretrained))

    def encode_texts(
        self, tok: Tokenizer, texts: Sequence[str], max_len: int, truncation: str = "head"
    ) -> encoding.EncodedTexts:
        """Texts -> [N, max_len] int32 ids, keeping the special tokens the tokenizer adds."""
        return encoding.encode_texts(tok, texts, max_len, truncation)


def small_space(extra: Callable[[Trial], dict[str, Any]] | None = None, *, sequence: bool = True) -> Space:
    """A from-scratch family's space: learning rate, the three kinds of regularisation, the
    width for a sequence family (the docs' measured ranges), then ``extra``'s own fields."""

    def draw(trial: Trial) -> tuple[dict[str, Any], dict[str, Any]]:
        training: dict[str, Any] = {
            "lr": trial.suggest_float("lr", 2e-4, 5e-3, log=True),
            "weight_decay": trial.suggest_float("weight_decay", 1e-3, 0.3, log=True),
            "word_dropout": trial.suggest_float("word_dropout", 0.0, 0.4),
        }
        model: dict[str, Any] = {"dropout": trial.suggest_float("dropout", 0.0, 0.6)}
        if sequence:
            model["d_model"] = trial.suggest_categorical("d_model", list(SEQUENCE_WIDTHS))
        if extra is not None:
            model |= extra(trial)
        return model, training

    return draw


# Every family, once `registry` has been given them (training/models/__init__.py does, on
# import): the checks below read it here rather than import the package, which imports them.
_REGISTERED: dict[str, Family] = {}


def registry(*families: Family) -> dict[str, Family]:
    """Families by name; each one's model class must carry that name."""
    for family in families:
        if family.model.family != family.name:
            raise ValueError(f"{family.name}: its model class says {family.model.family!r}")
    _REGISTERED.clear()
    _REGISTERED.update((family.name, family) for family in families)
    return _REGISTERED


def fine_tuned() -> str:
    """The family --pretrained fine-tunes (the one that loads checkpoints)."""
    return next(name for name, family in _REGISTERED.items() if family.checkpoint is not None)


def check_start(family: Family, pretrained: str | None, *, flag: str = "") -> None:
    """A family that fine-tunes a checkpoint needs --pretrained, and --pretrained needs such a
    family. ``flag``: how the family was named (``--model ``), for the message."""
    if (family.checkpoint is None) == (pretrained is None):
        return
    if family.checkpoint is None:
        raise FamilyError(f"--pretrained fine-tunes the {fine_tuned()} family, not {flag}{family.name}")
    raise FamilyError(f"the {family.name} family fine-tunes a pretrained checkpoint: give --pretrained")


def resolve_family(model: str | None, pretrained: str | None, default: str) -> str:
    """--model, implied by --pretrained, else ``default``; a pairing that cannot train is refused."""
    if model is None:
        model = default if pretrained is None else fine_tuned()
    check_start(_REGISTERED[model], pretrained, flag="--model ")
    return model
