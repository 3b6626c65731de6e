"""An encoder bundle's second graph: logits only, int8 per channel when its gate holds.

A tiny BERT fine-tuned in the test is exported with the defaults, with `--quantize int8` and
with `--quantize none`; a small family keeps its one graph. The label graph is checked as the
server reads it: listed with its checksum, logits its only output, its labels on the run's
held-out rows compared with the float32 graph's and recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from attnserve.export.evalset import encode_chunks, read_gate_rows
from attnserve.export.parity import cpu_session, run_onnx
from attnserve.export.writer import export_run
from attnserve.service.bundle import LABEL_MODEL_FILE, read_bundle, sha256_file
from tests.support.tiny_bert import shared_tiny_encoder_run


@pytest.fixture(scope="module")
def encoder_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_tiny_encoder_run(tmp_path_factory)


def _quantized_ops(path: Path) -> int:
    nodes = onnx.load(str(path)).graph.node
    return sum(node.op_type in ("DynamicQuantizeLinear", "MatMulInteger") for node in nodes)


def _labels(path: Path, run: Path, max_len: int) -> np.ndarray:
    rows, _ = read_gate_rows(run, 2, None)
    session = cpu_session(path)
    return np.concatenate(
        [
            run_onnx(session, chunk.input_ids, chunk.attention_mask).logits.argmax(axis=1)
            for chunk in encode_chunks(run / "tokenizer.json", rows, max_len, "head")
        ]
    )


def test_the_default_export_ships_an_int8_label_graph_beside_the_float_graph(
    encoder_run: Path, tmp_path: Path
) -> None:
    # A generous gate, so that the int8 form is the one chosen on a 2-layer model of 120 reviews.
    bundle = read_bundle(export_run(encoder_run, tmp_path / "models", "bert", max_accuracy_drop=1.0))
    manifest = bundle.manifest
    label = manifest.label_graph
    assert label is not None and bundle.label_model_path == bundle.root / LABEL_MODEL_FILE
    assert manifest.files[LABEL_MODEL_FILE] == sha256_file(bundle.root / LABEL_MODEL_FILE)
    assert manifest.quantization is None and _quantized_ops(bundle.model_path) == 0  # float32
    assert label.quantization is not None and label.quantization.rows is not None
    assert _quantized_ops(bundle.root / LABEL_MODEL_FILE) > 0
    session = cpu_session(bundle.root / LABEL_MODEL_FILE)
    assert [output.name for output in session.get_outputs()] == ["logits"]
    # The recorded comparison is the one a reader gets on the held-out rows.
    float_labels = _labels(bundle.model_path, encoder_run, manifest.max_len)
    int8_labels = _labels(bundle.root / LABEL_MODEL_FILE, encoder_run, manifest.max_len)
    assert label.rows == len(float_labels) == label.quantization.rows.rows
    assert label.labels_differing == int((float_labels != int8_labels).sum())
    assert 0 < label.logits_max_abs_diff <= label.quantization.tolerance  # type: ignore[operator]


def test_a_strict_gate_keeps_the_label_graph_float32_and_its_labels_identical(
    encoder_run: Path, tmp_path: Path
) -> None:
    bundle = read_bundle(export_run(encoder_run, tmp_path / "models", "bert", max_accuracy_drop=-1.0))
    label = bundle.manifest.label_graph
    assert label is not None and label.quantization is None
    assert _quantized_ops(bundle.root / LABEL_MODEL_FILE) == 0
    assert label.rows > 0 and label.labels_differing == 0 and label.logits_max_abs_diff < 1e-4


@pytest.mark.parametrize("quantize", ["int8", "none"])
def test_quantize_forces_one_form_for_both_graphs(encoder_run: Path, tmp_path: Path, quantize: str) -> None:
    bundle = read_bundle(
        export_run(encoder_run, tmp_path / "models", "bert", quantize=quantize, max_accuracy_drop=1.0)
    )
    manifest = bundle.manifest
    assert manifest.label_graph is not None
    int8 = quantize == "int8"
    assert (manifest.quantization is not None) == int8
    assert (manifest.label_graph.quantization is not None) == int8
    assert (_quantized_ops(bundle.model_path) > 0) == int8
    assert (_quantized_ops(bundle.root / LABEL_MODEL_FILE) > 0) == int8


def test_a_small_family_keeps_one_graph(exported_bundle: Callable[[str], Path]) -> None:
    bundle = read_bundle(exported_bundle("gru_attention"))
    assert bundle.manifest.label_graph is None and bundle.label_model_path is None
    assert LABEL_MODEL_FILE not in bundle.manifest.files
