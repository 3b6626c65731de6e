"""Export of a pretrained encoder (family "encoder"): a tiny BERT fine-tuned in the test.

The graph keeps the project's two inputs, outputs the logits and every layer's and head's
attention with symbolic batch and sequence dims, and matches PyTorch; the bundle ships the
checkpoint's own tokenizer byte for byte. `--optimize` applies onnxruntime's BERT fusions
but the ones that would drop the attention output, and int8 is accepted only when the
accuracy on the run's held-out test split holds.
"""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import pytest
from tokenizers import Tokenizer

from attnserve.export.contract import graph_contract
from attnserve.export.errors import ExportError
from attnserve.export.onnx import export_model
from attnserve.export.optimize import EncoderShape, fuse_transformer
from attnserve.export.parity import DEFAULT_TOLERANCE, cpu_session, run_onnx
from attnserve.export.writer import export_run
from attnserve.service.bundle import read_bundle
from attnserve.training.run.checkpoint import load_run
from tests.support.tiny_bert import shared_tiny_encoder_run

# onnxruntime operators that compute softmax(QK^T) inside and output no probabilities.
FUSED_ATTENTION = {"Attention", "MultiHeadAttention"}


@pytest.fixture(scope="module")
def encoder_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_tiny_encoder_run(tmp_path_factory)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("encoder-export") / "models"


def _ops(path: Path) -> collections.Counter[str]:
    return collections.Counter(node.op_type for node in onnx.load(str(path)).graph.node)


def test_the_bundle_holds_every_layer_and_head_and_the_checkpoints_tokenizer(
    encoder_run: Path, repository: Path
) -> None:
    bundle = read_bundle(export_run(encoder_run, repository, "float"))
    manifest = bundle.manifest
    assert manifest.family == "encoder"
    assert (manifest.attention.kind, manifest.attention.layers, manifest.attention.heads) == ("layers", 2, 2)
    assert [spec.name for spec in manifest.inputs] == ["input_ids", "attention_mask"]
    shapes = {spec.name: spec.shape for spec in manifest.outputs}
    assert shapes["attention"] == ["batch", 2, 2, "sequence", "sequence"]
    assert manifest.parity is not None and manifest.parity.logits_max_abs_diff <= DEFAULT_TOLERANCE
    assert (manifest.parity.attention_max_abs_diff or 0.0) <= DEFAULT_TOLERANCE
    assert bundle.tokenizer_path.read_bytes() == (encoder_run / "tokenizer.json").read_bytes()
    tokenizer = Tokenizer.from_file(str(bundle.tokenizer_path))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    for case in manifest.golden:
        assert case.input_ids is not None and case.input_ids[0] == cls and case.input_ids[-1] == sep
    # Any batch and length up to max_len: padded rows give no weight to padding.
    session = cpu_session(bundle.model_path)
    for batch, length in ((1, 3), (4, 11), (2, manifest.max_len)):
        ids = np.full((batch, length), 7, dtype=np.int64)  # [B, T]
        mask = np.ones_like(ids)  # [B, T]
        mask[-1, length // 2 + 1 :] = 0
        out = run_onnx(session, ids, mask)
        assert out.logits.shape == (batch, len(manifest.labels))
        assert out.attention is not None and out.attention.shape == (batch, 2, 2, length, length)
        assert not out.attention[-1, :, :, :, length // 2 + 1 :].any()


@pytest.mark.slow  # the dynamo exporter takes about ten seconds on the tiny model
def test_the_dynamo_exporter_proves_the_same_contract(encoder_run: Path, repository: Path) -> None:
    manifest = read_bundle(export_run(encoder_run, repository, "dynamo", exporter="dynamo")).manifest
    assert manifest.parity is not None and manifest.parity.logits_max_abs_diff <= DEFAULT_TOLERANCE
    assert {spec.name: spec.shape for spec in manifest.outputs}["attention"] == [
        "batch", 2, 2, "sequence", "sequence"
    ]  # fmt: skip


def test_optimize_fuses_the_layers_but_keeps_the_attention_output(
    encoder_run: Path, repository: Path
) -> None:
    bundle = read_bundle(export_run(encoder_run, repository, "optimized", optimize=True))
    ops = _ops(bundle.model_path)
    assert ops["SkipLayerNormalization"] > 0 and ops["Softmax"] == 2, ops
    assert not FUSED_ATTENTION & set(ops), ops
    parity = bundle.manifest.parity
    assert parity is not None and parity.attention_max_abs_diff is not None
    assert parity.attention_max_abs_diff <= DEFAULT_TOLERANCE


def test_the_attention_fusion_cannot_keep_the_attention_output(
    encoder_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why optimize.DISABLED_FUSIONS exists: with the Attention fusion on, the optimizer takes
    the softmax the attention output reads into an operator without that output. On the graph
    as the exporter writes it that breaks the graph; on the graph the export folds
    (export/shapes.py) it matches nothing, and it stays off."""
    model = load_run(encoder_run).model
    shape = EncoderShape(heads=2, hidden=32)
    folded = tmp_path / "exported.onnx"
    export_model(model, folded, graph_contract(model), opset=18, exporter="torchscript")
    everything = fuse_transformer(folded, tmp_path / "everything.onnx", shape, disabled=())
    assert not FUSED_ATTENTION & set(everything) and _ops(tmp_path / "everything.onnx")["Softmax"] == 2
    fused = fuse_transformer(folded, tmp_path / "kept.onnx", shape)
    assert not FUSED_ATTENTION & set(fused), fused

    monkeypatch.setattr("attnserve.export.onnx.fold_shapes", lambda path: 0)
    unfolded = tmp_path / "unfolded.onnx"
    export_model(model, unfolded, graph_contract(model), opset=18, exporter="torchscript")
    with pytest.raises(ExportError, match="DAG"):
        fuse_transformer(unfolded, tmp_path / "fused.onnx", shape, disabled=())


def test_int8_keeps_the_attention_output_and_the_accuracy(encoder_run: Path, repository: Path) -> None:
    bundle = read_bundle(export_run(encoder_run, repository, "int8", quantize="int8", optimize=True))
    quantization = bundle.manifest.quantization
    assert quantization is not None and quantization.after >= quantization.before - 0.01
    ops = _ops(bundle.model_path)
    assert ops["DynamicQuantizeMatMul"] + ops["MatMulInteger"] + ops["MatMulIntegerToFloat"] > 0, ops
    assert ops["Softmax"] == 2 and not FUSED_ATTENTION & set(ops), ops
    shapes = {spec.name: spec.shape for spec in bundle.manifest.outputs}
    assert shapes["attention"] == ["batch", 2, 2, "sequence", "sequence"]
