"""Bundles as written: read back by the service's reader, never overwritten, refused when damaged."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import cast

import numpy as np
import onnx
import pytest

from attnserve.export.errors import ExportError, ParityError, QuantizationRefused
from attnserve.export.evalset import encode_one
from attnserve.export.parity import cpu_session, run_onnx
from attnserve.export.writer import export_run
from attnserve.service.bundle import (
    MANIFEST_FILE,
    MODEL_FILE,
    STAGING_PREFIX,
    TOKENIZER_FILE,
    BundleError,
    check_io,
    read_bundle,
    sha256_file,
)
from tests.support.runs import FAMILIES


def _tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with its sha256: proof that nothing changed."""
    return {str(p.relative_to(folder)): sha256_file(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def _leftovers(model_dir: Path) -> list[str]:
    return sorted(p.name for p in model_dir.iterdir() if p.name.startswith(STAGING_PREFIX))


@pytest.mark.parametrize("family", FAMILIES)
def test_bundle_reads_back_with_golden_outputs_the_graph_reproduces(
    family: str, trained_run: Callable[[str], Path], exported_bundle: Callable[[str], Path]
) -> None:
    run_dir = trained_run(family)
    bundle = read_bundle(exported_bundle(family), expect_name=family, expect_version=1)
    manifest = bundle.manifest
    assert bundle.root.name == "1" and sorted(p.name for p in bundle.root.iterdir()) == sorted(
        [MANIFEST_FILE, MODEL_FILE, TOKENIZER_FILE]
    )
    assert (bundle.root / TOKENIZER_FILE).read_bytes() == (run_dir / "tokenizer.json").read_bytes()
    checkpoint_metrics = json.loads((run_dir / "metrics.json").read_text())
    assert manifest.family == family and manifest.labels == checkpoint_metrics["labels"]
    assert manifest.training_metrics["val"] == checkpoint_metrics["val"]
    assert manifest.exporter == "torchscript" and manifest.quantization is None
    assert [spec.name for spec in manifest.inputs] == ["input_ids", "attention_mask"]
    assert (manifest.output("attention") is None) == (family == "bow_mlp")

    session = cpu_session(bundle.model_path)
    check_io(manifest, session)
    eval_texts = [json.loads(line)["text"] for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    assert 2 <= len(manifest.golden) <= 4 and all(case.text in eval_texts for case in manifest.golden)
    for case in manifest.golden:
        ids, mask = encode_one(bundle.tokenizer_path, case.text, manifest.max_len, manifest.truncation)
        assert ids[0].tolist() == case.input_ids
        out = run_onnx(session, ids, mask)
        np.testing.assert_allclose(out.logits[0], case.logits, atol=case.tolerance, rtol=0)
        expected = case.attention_array()
        if family == "bow_mlp":
            assert expected is None and out.attention is None
        else:
            assert expected is not None and out.attention is not None
            np.testing.assert_allclose(out.attention[0], expected, atol=case.tolerance, rtol=0)


def test_exporting_again_adds_a_version_and_never_overwrites(
    trained_run: Callable[[str], Path], tmp_path: Path
) -> None:
    run_dir = trained_run("attention_pool")
    first = export_run(run_dir, tmp_path, "m")
    before = _tree(first)
    second = export_run(run_dir, tmp_path, "m")
    assert (first.name, second.name) == ("1", "2")
    assert _tree(first) == before
    assert read_bundle(second).manifest.version == 2

    with pytest.raises(ExportError, match=r"m/2 already exists; versions are never overwritten"):
        export_run(run_dir, tmp_path, "m", version=2)
    (tmp_path / "m" / "07").mkdir()  # a stray folder spelling 7 still reserves the number
    with pytest.raises(ExportError, match="already exists"):
        export_run(run_dir, tmp_path, "m", version=7)
    assert export_run(run_dir, tmp_path, "m", version=5).name == "5"
    assert export_run(run_dir, tmp_path, "m").name == "8"
    assert _tree(first) == before
    assert _leftovers(tmp_path / "m") == []


def test_failed_parity_publishes_nothing(trained_run: Callable[[str], Path], tmp_path: Path) -> None:
    with pytest.raises(
        ParityError, match=r"the exported graph does not match .* logits differ by .* tolerance 1e-12"
    ):
        export_run(trained_run("transformer"), tmp_path, "m", tolerance=1e-12)
    model_dir = tmp_path / "m"
    assert [p.name for p in model_dir.iterdir() if not p.name.startswith(".")] == []
    assert _leftovers(model_dir) == []


def test_int8_is_a_separate_version_with_its_accuracy_change(
    trained_run: Callable[[str], Path], tmp_path: Path
) -> None:
    run_dir = trained_run("transformer")
    float_bundle = export_run(run_dir, tmp_path, "m")
    before = _tree(float_bundle)
    int8_bundle = export_run(run_dir, tmp_path, "m", quantize="int8")
    assert int8_bundle.name == "2" and _tree(float_bundle) == before

    manifest = read_bundle(int8_bundle).manifest
    q = manifest.quantization
    assert q is not None and q.method == "dynamic-int8" and q.metric == "accuracy" and q.max_drop == 0.01
    assert 0.0 <= q.after <= 1.0 and q.before - q.after <= q.max_drop
    float_test = cast(dict[str, float], read_bundle(float_bundle).manifest.training_metrics["test"])
    assert q.before == float_test["accuracy"]  # the gate measures the held-out test split
    ops = {node.op_type for node in onnx.load(str(int8_bundle / MODEL_FILE)).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops
    assert manifest.parity is not None and manifest.parity.logits_max_abs_diff > 0
    check_io(manifest, cpu_session(int8_bundle / MODEL_FILE))


def test_int8_is_refused_when_accuracy_drops_past_the_threshold(
    trained_run: Callable[[str], Path], tmp_path: Path
) -> None:
    # A negative allowance demands a gain of more than one point, which int8 cannot deliver here.
    with pytest.raises(
        QuantizationRefused, match=r"refused: held-out accuracy \(test\.jsonl\) .* allowed -1\.00"
    ):
        export_run(trained_run("self_attention"), tmp_path, "m", quantize="int8", max_accuracy_drop=-0.01)
    assert [p.name for p in (tmp_path / "m").iterdir() if not p.name.startswith(".")] == []


def test_optimized_graph_is_stored_and_proven(trained_run: Callable[[str], Path], tmp_path: Path) -> None:
    plain = export_run(trained_run("transformer"), tmp_path, "m")
    optimized = export_run(trained_run("transformer"), tmp_path, "m", optimize=True)
    bundle = read_bundle(optimized)
    assert sha256_file(plain / MODEL_FILE) != sha256_file(optimized / MODEL_FILE)
    assert bundle.manifest.parity is not None and bundle.manifest.parity.logits_max_abs_diff <= 1e-4
    check_io(bundle.manifest, cpu_session(bundle.model_path))


def test_tampered_model_bytes_are_refused(bundle_copy: Callable[[str], Path]) -> None:
    root = bundle_copy("attention_pool")
    data = bytearray((root / MODEL_FILE).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (root / MODEL_FILE).write_bytes(bytes(data))
    with pytest.raises(BundleError, match=r"model.onnx sha256 mismatch"):
        read_bundle(root)


def test_edited_manifest_is_refused(bundle_copy: Callable[[str], Path]) -> None:
    root = bundle_copy("bow_mlp")
    manifest = json.loads((root / MANIFEST_FILE).read_text())
    manifest["files"][TOKENIZER_FILE] = "0" * 64
    (root / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"tokenizer.json sha256 mismatch"):
        read_bundle(root)
    manifest["schema_version"] = 99
    (root / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"unknown schema_version 99"):
        read_bundle(root)
