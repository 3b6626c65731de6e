"""The model bundle: `models/<name>/<version>/{model.onnx, tokenizer.json, bundle.json}`.

`BundleManifest` is the one definition of `bundle.json`: export writes it, the service reads
it. This module must stay importable in the serving image, so it depends on the standard
library, pydantic and numpy only (no torch, no onnx, no onnxruntime).

A bundle is written to a staging folder (`STAGING_PREFIX` + anything) inside the model's
folder and renamed to its version number when complete, so a reader that lists version
folders never sees half a bundle.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

SCHEMA_VERSION: Literal[1] = 1
MANIFEST_FILE = "bundle.json"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
REQUIRED_FILES = (MODEL_FILE, TOKENIZER_FILE)
STAGING_PREFIX = ".staging-"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]+$")

AttentionKind = Literal["pool", "self", "layers", "none"]
TensorDType = Literal["int64", "int32", "float32", "float16", "string"]
Dim = int | str  # an int is a fixed size, a str a symbolic (dynamic) dimension


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
        if self.kind == "layers" and (self.layers < 1 or self.heads < 1):
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


class QuantizationInfo(_Strict):
    method: str  # e.g. "dynamic-int8"
    source_version: int | None = None
    metric: str = "accuracy"
    before: float
    after: float
    max_drop: float


class BundleManifest(_Strict):
    schema_version: Literal[1] = SCHEMA_VERSION
    name: str
    version: int = Field(ge=1)
    family: str
    labels: list[str] = Field(min_length=2)
    max_len: int = Field(ge=1)
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
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @field_validator("name")
    @classmethod
    def _name_ok(cls, value: str) -> str:
        if not NAME_PATTERN.match(value) or value.startswith("."):
            raise ValueError(f"model name {value!r} must match {NAME_PATTERN.pattern} and not start with '.'")
        return value

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
        if isinstance(classes, int) and classes != len(self.labels):
            raise ValueError(f"logits has {classes} classes but labels lists {len(self.labels)}")
        has_attention = "attention" in outputs
        if has_attention != (self.attention.kind != "none"):
            raise ValueError(
                f"attention kind {self.attention.kind!r} "
                f"{'needs' if not has_attention else 'must not have'} an 'attention' output"
            )
        names = {spec.name for spec in self.inputs}
        if not {"input_ids", "attention_mask"} <= names:
            raise ValueError("inputs must include 'input_ids' and 'attention_mask'")
        return self

    def output(self, name: str) -> TensorSpec | None:
        return next((spec for spec in self.outputs if spec.name == name), None)


@dataclass(frozen=True)
class Bundle:
    """A verified bundle on disk."""

    manifest: BundleManifest
    root: Path

    @property
    def model_path(self) -> Path:
        return self.root / MODEL_FILE

    @property
    def tokenizer_path(self) -> Path:
        return self.root / TOKENIZER_FILE


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


def is_version_dir(path: Path) -> bool:
    """True for a completed version folder (a positive integer name), never a staging folder."""
    return path.is_dir() and path.name.isdigit() and int(path.name) >= 1 and path.name == str(int(path.name))


def read_manifest(directory: Path) -> BundleManifest:
    """Parse and validate `bundle.json` without touching the other files."""
    if directory.name.startswith(STAGING_PREFIX):
        raise BundleError(f"{directory} is a staging folder: the bundle is still being written")
    if not directory.is_dir():
        raise BundleError(f"{directory} is not a bundle folder (it does not exist or is not a directory)")
    path = directory / MANIFEST_FILE
    if not path.is_file():
        raise BundleError(f"{directory} has no {MANIFEST_FILE}: the bundle is half-written or not a bundle")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{path} is not readable JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise BundleError(f"{path} must hold a JSON object")
    schema = raw.get("schema_version")
    if schema != SCHEMA_VERSION:
        raise BundleError(
            f"{path} has unknown schema_version {schema!r}; this reader supports {SCHEMA_VERSION}"
        )
    try:
        return BundleManifest.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in err['loc']) or '(root)'}: {err['msg']}" for err in exc.errors()
        )
        raise BundleError(f"{path} is not a valid manifest: {problems}") from None


def read_bundle(
    directory: Path | str, *, expect_name: str | None = None, expect_version: int | None = None
) -> Bundle:
    """Read and verify a bundle folder: manifest, presence and sha256 of every listed file."""
    root = Path(directory)
    manifest = read_manifest(root)
    if expect_name is not None and manifest.name != expect_name:
        raise BundleError(f"{root}: manifest names model {manifest.name!r}, expected {expect_name!r}")
    if expect_version is not None and manifest.version != expect_version:
        raise BundleError(f"{root}: manifest says version {manifest.version}, folder says {expect_version}")
    for filename, expected in manifest.files.items():
        path = root / filename
        if not path.is_file():
            raise BundleError(f"{root}: {filename} is missing (listed in {MANIFEST_FILE})")
        actual = sha256_file(path)
        if actual != expected:
            raise BundleError(
                f"{root}: {filename} sha256 mismatch (manifest {expected[:12]}…, file {actual[:12]}…): "
                "the file was modified or only partly copied"
            )
    return Bundle(manifest=manifest, root=root)


class _NodeArg(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def shape(self) -> Sequence[object]: ...


class SessionLike(Protocol):
    """The part of `onnxruntime.InferenceSession` that `check_io` reads."""

    def get_inputs(self) -> Sequence[_NodeArg]: ...
    def get_outputs(self) -> Sequence[_NodeArg]: ...


def _check_tensors(
    kind: str, declared: Sequence[TensorSpec], actual: Sequence[_NodeArg], exact: bool
) -> None:
    found = {arg.name: arg for arg in actual}
    missing = [spec.name for spec in declared if spec.name not in found]
    if missing:
        raise BundleError(f"model {kind} {missing} are declared in the manifest but absent from the graph")
    if exact:
        extra = sorted(set(found) - {spec.name for spec in declared})
        if extra:
            raise BundleError(f"model {kind} {extra} are in the graph but not declared in the manifest")
    for spec in declared:
        arg = found[spec.name]
        dtype = f"tensor({spec.dtype if spec.dtype != 'float32' else 'float'})"
        if arg.type != dtype:
            raise BundleError(f"{kind[:-1]} {spec.name!r}: graph has {arg.type}, manifest declares {dtype}")
        shape = list(arg.shape)
        if len(shape) != len(spec.shape):
            raise BundleError(
                f"{kind[:-1]} {spec.name!r}: graph has rank {len(shape)} {shape}, "
                f"manifest declares {spec.shape}"
            )
        for axis, (want, have) in enumerate(zip(spec.shape, shape, strict=True)):
            if isinstance(want, str) and isinstance(have, int):
                raise BundleError(
                    f"{kind[:-1]} {spec.name!r} axis {axis}: graph has fixed size {have}, "
                    f"manifest declares dynamic {want!r} (the exporter baked in a static shape)"
                )
            if isinstance(want, int) and isinstance(have, int) and want != have:
                raise BundleError(
                    f"{kind[:-1]} {spec.name!r} axis {axis}: graph has size {have}, manifest declares {want}"
                )


def check_io(manifest: BundleManifest, session: SessionLike) -> None:
    """Verify an onnxruntime session's inputs and outputs are the ones the manifest declares."""
    _check_tensors("inputs", manifest.inputs, session.get_inputs(), exact=True)
    _check_tensors("outputs", manifest.outputs, session.get_outputs(), exact=False)
