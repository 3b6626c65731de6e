"""The bundle reader refuses every broken bundle with one error type and a clear message."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnxruntime as ort
import pytest

from attnserve.service.bundle import (
    MANIFEST_FILE,
    MODEL_FILE,
    STAGING_PREFIX,
    TOKENIZER_FILE,
    BundleError,
    BundleManifest,
    TensorSpec,
    check_io,
    read_bundle,
    read_manifest,
    sha256_file,
    write_manifest,
)


def _session(bundle_dir: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(bundle_dir / MODEL_FILE), providers=["CPUExecutionProvider"])


def _edit_manifest(bundle_dir: Path, **changes: Any) -> None:
    path = bundle_dir / MANIFEST_FILE
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("family", ["transformer", "attention_pool", "bow_mlp"])
def test_pipeline_bundles_read_and_match_their_graph(
    exported_bundle: Callable[[str], Path], family: str
) -> None:
    bundle = read_bundle(exported_bundle(family), expect_name=family, expect_version=1)
    manifest = bundle.manifest
    assert manifest.schema_version == 1
    assert manifest.files[MODEL_FILE] == sha256_file(bundle.model_path)
    assert manifest.golden, "export must record golden cases"
    assert (manifest.attention.kind == "none") == (manifest.output("attention") is None)
    check_io(manifest, _session(bundle.root))


def test_tampered_model_bytes_are_refused(bundle_copy: Callable[[str], Path]) -> None:
    bundle_dir = bundle_copy("bow_mlp")
    data = bytearray((bundle_dir / MODEL_FILE).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (bundle_dir / MODEL_FILE).write_bytes(bytes(data))
    with pytest.raises(BundleError, match=r"model\.onnx sha256 mismatch"):
        read_bundle(bundle_dir)


def test_truncated_tokenizer_is_refused(bundle_copy: Callable[[str], Path]) -> None:
    bundle_dir = bundle_copy("bow_mlp")
    path = bundle_dir / TOKENIZER_FILE
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(BundleError, match=r"tokenizer\.json sha256 mismatch"):
        read_bundle(bundle_dir)


def test_missing_tokenizer_is_refused(bundle_copy: Callable[[str], Path]) -> None:
    bundle_dir = bundle_copy("bow_mlp")
    (bundle_dir / TOKENIZER_FILE).unlink()
    with pytest.raises(BundleError, match=r"tokenizer\.json is missing"):
        read_bundle(bundle_dir)


def test_folder_without_manifest_is_half_written(bundle_copy: Callable[[str], Path]) -> None:
    bundle_dir = bundle_copy("bow_mlp")
    (bundle_dir / MANIFEST_FILE).unlink()
    with pytest.raises(BundleError, match="half-written"):
        read_bundle(bundle_dir)


def test_staging_folder_is_refused_even_when_complete(bundle_copy: Callable[[str], Path]) -> None:
    bundle_dir = bundle_copy("bow_mlp")
    staging = bundle_dir.parent / f"{STAGING_PREFIX}abc"
    shutil.copytree(bundle_dir, staging)
    with pytest.raises(BundleError, match="staging folder"):
        read_bundle(staging)


def test_unknown_schema_version_is_refused(bundle_copy: Callable[[str], Path]) -> None:
    bundle_dir = bundle_copy("bow_mlp")
    _edit_manifest(bundle_dir, schema_version=2)
    with pytest.raises(BundleError, match="unknown schema_version 2; this reader supports 1"):
        read_bundle(bundle_dir)


def test_manifest_that_is_not_json_is_refused(bundle_copy: Callable[[str], Path]) -> None:
    bundle_dir = bundle_copy("bow_mlp")
    (bundle_dir / MANIFEST_FILE).write_text('{"schema_version": 1, "name": ')
    with pytest.raises(BundleError, match="not readable JSON"):
        read_manifest(bundle_dir)


def test_invalid_manifest_names_the_field(bundle_copy: Callable[[str], Path]) -> None:
    bundle_dir = bundle_copy("bow_mlp")
    _edit_manifest(bundle_dir, labels=["only-one"])
    with pytest.raises(BundleError, match=r"labels lists 1; .* needs at least 2"):
        read_bundle(bundle_dir)


def test_the_truncation_side_is_recorded_and_older_bundles_read_without_it(
    bundle_copy: Callable[[str], Path],
) -> None:
    bundle_dir = bundle_copy("bow_mlp")
    assert read_bundle(bundle_dir).manifest.truncation == "head"
    path = bundle_dir / MANIFEST_FILE
    older = {key: value for key, value in json.loads(path.read_text()).items() if key != "truncation"}
    path.write_text(json.dumps(older))
    assert read_bundle(bundle_dir).manifest.truncation is None  # the tokenizer file decides
    _edit_manifest(bundle_dir, truncation="head+tail")
    with pytest.raises(BundleError, match="truncation"):
        read_bundle(bundle_dir)


def test_name_and_version_must_match_the_folder(bundle_copy: Callable[[str], Path]) -> None:
    bundle_dir = bundle_copy("bow_mlp")
    with pytest.raises(BundleError, match="manifest says version 1, folder says 2"):
        read_bundle(bundle_dir, expect_version=2)
    with pytest.raises(BundleError, match="expected 'other'"):
        read_bundle(bundle_dir, expect_name="other")


def test_check_io_refuses_undeclared_inputs_outputs_and_dtypes(
    exported_bundle: Callable[[str], Path],
) -> None:
    bundle = read_bundle(exported_bundle("attention_pool"))
    session = _session(bundle.root)
    manifest = bundle.manifest
    renamed = manifest.model_copy(
        update={"inputs": [*manifest.inputs[:1], TensorSpec(name="mask", dtype="int64", shape=["b", "t"])]}
    )
    with pytest.raises(BundleError, match=r"inputs \['mask'\] are declared"):
        check_io(renamed, session)
    wrong_dtype = manifest.model_copy(
        update={
            "inputs": [
                TensorSpec(name="input_ids", dtype="int32", shape=["batch", "sequence"]),
                *manifest.inputs[1:],
            ]
        }
    )
    with pytest.raises(BundleError, match=r"input 'input_ids': graph has tensor\(int64\)"):
        check_io(wrong_dtype, session)
    extra_output = manifest.model_copy(
        update={
            "outputs": [*manifest.outputs, TensorSpec(name="hidden", dtype="float32", shape=["batch", 8])]
        }
    )
    with pytest.raises(BundleError, match=r"outputs \['hidden'\] are declared"):
        check_io(extra_output, session)


def test_write_manifest_round_trips_and_is_world_readable(
    exported_bundle: Callable[[str], Path], tmp_path: Path
) -> None:
    manifest = read_manifest(exported_bundle("transformer"))
    path = write_manifest(tmp_path, manifest)
    assert BundleManifest.model_validate_json(path.read_text()) == manifest
    assert os.stat(path).st_mode & 0o044 == 0o044
    assert [p.name for p in tmp_path.iterdir()] == [MANIFEST_FILE], "no temporary file may remain"


@dataclass(frozen=True)
class _Arg:
    name: str
    type: str
    shape: list[int | str | None]


@dataclass(frozen=True)
class _GraphIO:
    """The inputs/outputs an onnxruntime session reports for a graph exported with static shapes."""

    inputs: list[_Arg]
    outputs: list[_Arg]

    def get_inputs(self) -> list[_Arg]:
        return self.inputs

    def get_outputs(self) -> list[_Arg]:
        return self.outputs


def test_check_io_refuses_a_graph_with_baked_in_sizes(exported_bundle: Callable[[str], Path]) -> None:
    manifest = read_manifest(exported_bundle("attention_pool"))
    static = _GraphIO(
        inputs=[_Arg("input_ids", "tensor(int64)", [2, 7]), _Arg("attention_mask", "tensor(int64)", [2, 7])],
        outputs=[
            _Arg("logits", "tensor(float)", [2, len(manifest.labels)]),
            _Arg("attention", "tensor(float)", [2, 7]),
        ],
    )
    with pytest.raises(BundleError, match="axis 0: graph has fixed size 2, manifest declares dynamic"):
        check_io(manifest, static)
