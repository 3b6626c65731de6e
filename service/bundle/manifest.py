"""The bundle manifest, `bundle.json`: the one definition of what a bundle declares.

Export writes it (through `write_manifest`), the service reads it (`reader.py`). Standard
library, pydantic and numpy only: this package is part of the torch-free serving install.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from attnserve.service.bundle.calibration import Calibration
from attnserve.service.bundle.layout import NAME_PATTERN
from attnserve.service.bundle.long_texts import LongTexts
from attnserve.service.bundle.profile import DataProfile
from attnserve.service.bundle.scoring import SINGLE_LABEL, Scoring
from attnserve.service.common.vocabulary import AttentionKind as AttentionKind  # the client reads it too

SCHEMA_VERSION: Literal[1] = 1
MANIFEST_FILE = "bundle.json"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
LABEL_MODEL_FILE = "label.onnx"
REQUIRED_FILES = (MODEL_FILE, TOKENIZER_FILE)
Truncation = Literal["head", "tail"]  # which end of a long text the model was trained on
TensorDType = Literal["int64", "int32", "float32", "float16", "string"]
Dim = int | str  # an int is a fixed size, a str a symbolic (dynamic) dimension


def model_name(value: str) -> str:
    """`value`, when it may name a model (a manifest's validator); ValueError otherwise."""
    if not NAME_PATTERN.match(value) or value.startswith("."):
        raise ValueError(f"model name {value!r} must match {NAME_PATTERN.pattern} and not start with '.'")
    return value


class BundleError(Exception):
    """A bundle is missing, incomplete, tampered with or not what its manifest declares."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AttentionSpec(_Strict):
    """What the `attention` output holds. `pool`: [B,T]; `self`: [B,T,T]; `layers`: [B,L,H,T,T]."""

    kind: AttentionKind
    layers: int = Field(0, ge=0)
    heads: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> AttentionSpec:
        if self.kind == AttentionKind.LAYERS and (self.layers < 1 or self.heads < 1):
            raise ValueError("attention kind 'layers' needs layers >= 1 and heads >= 1")
        return self


class TensorSpec(_Strict):
    name: str
    dtype: TensorDType
    shape: list[Dim]


class ParityReport(_Strict):
    """Worst torch-vs-onnxruntime differences found at export time."""

    logits_max_abs_diff: float = Field(ge=0)
    attention_max_abs_diff: float | None = Field(default=None, ge=0)
    lengths: list[int]
    batch_sizes: list[int]
    provider: str = "CPUExecutionProvider"


class GoldenCase(_Strict):
    """One text with the outputs export observed for it alone (batch of one, no padding).

    `attention` is flattened row-major; `attention_shape` is the per-text shape
    ([T] for pool, [T,T] for self, [L,H,T,T] for layers).
    """

    text: str
    input_ids: list[int] | None = None
    logits: list[float]
    attention: list[float] | None = None
    attention_shape: list[int] | None = None
    tolerance: float = Field(1e-4, gt=0)

    @model_validator(mode="after")
    def _shape_matches(self) -> GoldenCase:
        if (self.attention is None) != (self.attention_shape is None):
            raise ValueError("attention and attention_shape must be given together")
        if self.attention is not None and self.attention_shape is not None:
            expected = int(np.prod(self.attention_shape))
            if expected != len(self.attention):
                raise ValueError(
                    f"attention has {len(self.attention)} values but attention_shape "
                    f"{self.attention_shape} needs {expected}"
                )
        return self

    def attention_array(self) -> np.ndarray | None:
        if self.attention is None or self.attention_shape is None:
            return None
        return np.asarray(self.attention, dtype=np.float32).reshape(self.attention_shape)


class GateRows(_Strict):
    """The labelled rows the int8 accuracy gate measured: a split of the training run that
    neither trained the model nor chose its checkpoint."""

    file: str  # in the run directory, e.g. "test.jsonl"
    split: str  # the run's split those rows are, e.g. "test"
    rows: int = Field(ge=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")  # of the file, to tell which rows these were
    seed: int | None = None  # the data seed that drew the split, when the run recorded it


class QuantizationInfo(_Strict):
    method: str  # e.g. "dynamic-int8"
    source_version: int | None = None
    metric: str = "accuracy"
    before: float
    after: float
    max_drop: float
    # Declared before measuring: the largest |int8 - PyTorch| output allowed on the golden
    # cases, and their tolerance. Absent from bundles written before it was declared.
    tolerance: float | None = Field(default=None, gt=0)
    rows: GateRows | None = None  # absent from bundles gated on the validation split


class LabelGraph(_Strict):
    """The graph that answers calls asking no attention: logits only, dynamic int8 per channel
    when its gate held on the run's held-out rows, float32 otherwise (`quantization` None)."""

    file: str = LABEL_MODEL_FILE
    quantization: QuantizationInfo | None = None
    # Against the float32 graph on the gate's rows: labels that differ (0 to be served) and the
    # largest |logit| difference.
    rows: int = Field(0, ge=0)
    labels_differing: int = Field(0, ge=0)
    logits_max_abs_diff: float = Field(0.0, ge=0)


class ServingHints(_Strict):
    """How the server should run this model where its own flags leave it open."""

    intra_op_threads: int | None = Field(None, ge=1)  # None: the server measures and chooses


class BundleManifest(_Strict):
    schema_version: Literal[1] = SCHEMA_VERSION
    name: str
    version: int = Field(ge=1)
    family: str
    labels: list[str] = Field(min_length=1)  # two or more; one for a regression model (scoring)
    max_len: int = Field(ge=1)
    # The end of a long text the server keeps; absent from older bundles, whose tokenizer.json decides.
    truncation: Truncation | None = None
    pad_id: int = Field(0, ge=0)
    attention: AttentionSpec
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    opset: int = Field(ge=1)
    exporter: str
    files: dict[str, str]
    training_metrics: dict[str, object] = Field(default_factory=dict)
    parity: ParityReport | None = None
    golden: list[GoldenCase] = Field(default_factory=list)
    quantization: QuantizationInfo | None = None
    # What the model saw at training time (profile.py); absent from bundles written before it.
    data_profile: DataProfile | None = None
    # Encoders: the second graph for label-only calls; absent: model.onnx answers every call.
    label_graph: LabelGraph | None = None
    # The temperature served probabilities divide the logits by (calibration.py); absent: 1.
    calibration: Calibration | None = None
    serving: ServingHints | None = None
    # What the scores mean (scoring.py); absent: a softmax over two or more labels.
    scoring: Scoring | None = None
    # How a text over max_len is read as windows (long_texts.py); absent: the server's default.
    long_texts: LongTexts | None = None
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @field_validator("name")
    @classmethod
    def _name_ok(cls, value: str) -> str:
        return model_name(value)

    @field_validator("labels")
    @classmethod
    def _labels_unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("labels must be unique")
        return value

    @field_validator("files")
    @classmethod
    def _files_ok(cls, value: dict[str, str]) -> dict[str, str]:
        for filename, digest in value.items():
            if "/" in filename or "\\" in filename or filename in ("", ".", "..", MANIFEST_FILE):
                raise ValueError(f"files: {filename!r} is not a plain file name of the bundle")
            if not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise ValueError(f"files: {filename!r} has no sha256 hex digest")
        missing = [name for name in REQUIRED_FILES if name not in value]
        if missing:
            raise ValueError(f"files must list {', '.join(missing)}")
        return value

    @model_validator(mode="after")
    def _io_consistent(self) -> BundleManifest:
        outputs = {spec.name: spec for spec in self.outputs}
        if "logits" not in outputs:
            raise ValueError("outputs must include 'logits'")
        classes = outputs["logits"].shape[-1] if outputs["logits"].shape else None
        self.scores.check_labels(len(self.labels))
        if self.long_texts is not None:
            vector = outputs["vector"].shape[-1] if "vector" in outputs and outputs["vector"].shape else None
            self.long_texts.check(self.max_len, len(self.labels), vector if isinstance(vector, int) else None)
        if isinstance(classes, int) and classes != len(self.labels):
            raise ValueError(f"logits has {classes} classes but labels lists {len(self.labels)}")
        has_attention = "attention" in outputs
        if has_attention != (self.attention.kind != AttentionKind.NONE):
            raise ValueError(
                f"attention kind {self.attention.kind.value!r} "
                f"{'needs' if not has_attention else 'must not have'} an 'attention' output"
            )
        if self.label_graph is not None and self.label_graph.file not in self.files:
            raise ValueError(f"label_graph names {self.label_graph.file!r}, which files does not list")
        names = {spec.name for spec in self.inputs}
        if not {"input_ids", "attention_mask"} <= names:
            raise ValueError("inputs must include 'input_ids' and 'attention_mask'")
        return self

    @property
    def scores(self) -> Scoring:
        """The model's scoring; single-label for a bundle that declares none."""
        return self.scoring if self.scoring is not None else SINGLE_LABEL

    def output(self, name: str) -> TensorSpec | None:
        return next((spec for spec in self.outputs if spec.name == name), None)


def sha256_file(path: Path, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def hash_files(directory: Path, names: Sequence[str]) -> dict[str, str]:
    """The `files` mapping for a manifest: sha256 of each named file in `directory`."""
    return {name: sha256_file(directory / name) for name in names}


def write_manifest(directory: Path, manifest: BundleManifest) -> Path:
    """Write `bundle.json` atomically (temp file + rename) and return its path."""
    path = directory / MANIFEST_FILE
    text = manifest.model_dump_json(indent=2) + "\n"
    fd, temp = tempfile.mkstemp(prefix=".bundle-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o644)  # mkstemp's 0600 would hide it from a serving user
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path
