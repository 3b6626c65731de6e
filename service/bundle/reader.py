"""Reading a bundle folder back: the manifest, every file's sha256, and the model's I/O
against what the manifest declares."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from attnserve.service.bundle.layout import STAGING_PREFIX
from attnserve.service.bundle.manifest import (
    MANIFEST_FILE,
    MODEL_FILE,
    SCHEMA_VERSION,
    TOKENIZER_FILE,
    BundleError,
    BundleManifest,
    TensorSpec,
    sha256_file,
)


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

    @property
    def label_model_path(self) -> Path | None:
        """The label-only graph (encoders), or None when model.onnx answers every call."""
        graph = self.manifest.label_graph
        return None if graph is None else self.root / graph.file


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


def check_label_io(manifest: BundleManifest, session: SessionLike) -> None:
    """Verify the label graph's session: the manifest's inputs, and `logits` as its one output
    (with `vector` beside it where the manifest declares one: a document head reads it)."""
    _check_tensors("inputs", manifest.inputs, session.get_inputs(), exact=True)
    logits = [spec for spec in manifest.outputs if spec.name in ("logits", "vector")]
    _check_tensors("label graph outputs", logits, session.get_outputs(), exact=True)


def label_tolerance(manifest: BundleManifest, case_tolerance: float) -> float:
    """How far the label graph's logits may stray from a golden case's: the int8 gate's
    declared tolerance when the label graph is int8, else the case's own."""
    graph = manifest.label_graph
    quantization = graph.quantization if graph is not None else None
    if quantization is not None and quantization.tolerance is not None:
        return max(quantization.tolerance, case_tolerance)
    return case_tolerance
