"""Make new and damaged bundle versions from a real one, as a deployment would (or would
by mistake): each new version is written to a staging folder and renamed into place."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from attnserve.service.bundle import MANIFEST_FILE, MODEL_FILE, STAGING_PREFIX, TOKENIZER_FILE, sha256_file

DAMAGES = (
    "truncated onnx",
    "zero-byte onnx",
    "wrong inputs and outputs",
    "golden mismatch",
    "sha256 mismatch",
    "half-copied folder",
)


def write_manifest(directory: Path, manifest: dict[str, object]) -> None:
    (directory / MANIFEST_FILE).write_text(json.dumps(manifest))


def reseal(directory: Path) -> None:
    """Record the files' current sha256 in the manifest (a damage the checksums cannot see)."""
    manifest = json.loads((directory / MANIFEST_FILE).read_text())
    manifest["files"] = {name: sha256_file(directory / name) for name in manifest["files"]}
    write_manifest(directory, manifest)


def _foreign_graph(path: Path) -> None:
    """A valid ONNX model whose inputs and outputs are not the bundle's."""
    node = helper.make_node("Cast", ["input_ids"], ["scores"], to=TensorProto.FLOAT)
    graph = helper.make_graph(
        [node],
        "foreign",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", "sequence"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    onnx.save(model, path)


def add_version(root: Path, name: str, version: int, *, source: int = 1, damage: str | None = None) -> Path:
    """Copy `name/source` to `name/version` (manifest renumbered), damaged as asked."""
    staging = root / name / f"{STAGING_PREFIX}{version}"
    shutil.copytree(root / name / str(source), staging)
    manifest = json.loads((staging / MANIFEST_FILE).read_text())
    manifest["version"] = version
    write_manifest(staging, manifest)
    model = staging / MODEL_FILE
    if damage == "truncated onnx":
        model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
        reseal(staging)
    elif damage == "zero-byte onnx":
        model.write_bytes(b"")
        reseal(staging)
    elif damage == "wrong inputs and outputs":
        _foreign_graph(model)
        reseal(staging)
    elif damage == "golden mismatch":
        manifest["golden"][0]["logits"][0] += 0.5
        write_manifest(staging, manifest)
    elif damage == "sha256 mismatch":
        data = bytearray(model.read_bytes())
        data[len(data) // 2] ^= 0x55
        model.write_bytes(bytes(data))
    elif damage == "half-copied folder":  # a copy straight into place, caught halfway
        model.write_bytes(model.read_bytes()[: model.stat().st_size // 3])
        (staging / TOKENIZER_FILE).unlink()
    elif damage is not None:
        raise ValueError(f"unknown damage {damage!r}")
    target = root / name / str(version)
    staging.rename(target)
    return target


def finish_copy(root: Path, name: str, version: int, *, source: int = 1) -> None:
    """Complete a half-copied version folder (the copy catches up)."""
    target = root / name / str(version)
    for filename in (MODEL_FILE, TOKENIZER_FILE):
        shutil.copyfile(root / name / str(source) / filename, target / filename)
