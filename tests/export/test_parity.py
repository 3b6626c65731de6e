"""The exported graph: checker-clean, symbolic dims, and equal to PyTorch in onnxruntime."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnserve.export.contract import BATCH, SEQUENCE, graph_contract
from attnserve.export.errors import ExportError
from attnserve.export.onnx import export_model, verify_graph
from attnserve.export.parity import (
    DEFAULT_BATCH_SIZES,
    DEFAULT_TOLERANCE,
    compare,
    cpu_session,
    measure_parity,
    run_onnx,
    run_torch,
)
from attnserve.service.bundle import read_bundle
from attnserve.training.models.base import Classifier
from attnserve.training.run.checkpoint import LoadedRun, load_run
from tests.support.runs import ATTENTION_FAMILIES, FAMILIES


def _graph_dims(path: Path) -> dict[str, list[int | str]]:
    graph = onnx.load(str(path)).graph
    return {
        value.name: [
            d.dim_param if d.HasField("dim_param") else d.dim_value for d in value.type.tensor_type.shape.dim
        ]
        for value in [*graph.input, *graph.output]
    }


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_exports_with_symbolic_dims_and_matches_torch(
    family: str, trained_run: Callable[[str], Path], exported_bundle: Callable[[str], Path]
) -> None:
    run = load_run(trained_run(family))
    bundle = read_bundle(exported_bundle(family))
    manifest = bundle.manifest
    onnx.checker.check_model(str(bundle.model_path), full_check=True)
    assert manifest.opset >= 17

    dims = _graph_dims(bundle.model_path)
    assert dims["input_ids"] == dims["attention_mask"] == [BATCH, SEQUENCE]
    assert dims["logits"] == [BATCH, len(run.labels)]
    expected_attention = {
        "pool": [BATCH, SEQUENCE],
        "self": [BATCH, SEQUENCE, SEQUENCE],
        "layers": [BATCH, manifest.attention.layers, manifest.attention.heads, SEQUENCE, SEQUENCE],
    }
    if manifest.attention.kind == "none":
        assert set(dims) == {"input_ids", "attention_mask", "logits"}
    else:
        assert dims["attention"] == expected_attention[manifest.attention.kind]
    if family == "transformer":
        assert (manifest.attention.layers, manifest.attention.heads) == (2, 2)

    # Lengths and batch sizes the export example (3 x 7) never used: a baked-in dim fails here.
    result = measure_parity(run.model, cpu_session(bundle.model_path), max_len=run.max_len, seed=1)
    assert result.failures() == []
    assert result.lengths == sorted({1, 2, 7, run.max_len} | ({64} if run.max_len >= 64 else set()))
    assert result.batch_sizes == sorted(DEFAULT_BATCH_SIZES)
    assert any(case.padded_rows > 0 for case in result.cases)
    assert result.logits_max_abs_diff <= DEFAULT_TOLERANCE
    if manifest.attention.kind == "none":
        assert result.attention_max_abs_diff is None
    else:
        assert result.attention_max_abs_diff is not None
        assert result.attention_max_abs_diff <= DEFAULT_TOLERANCE
    assert manifest.parity is not None
    assert manifest.parity.logits_max_abs_diff <= DEFAULT_TOLERANCE
    assert manifest.parity.lengths == result.lengths


@pytest.fixture(scope="module")
def loaded(
    trained_run: Callable[[str], Path], exported_bundle: Callable[[str], Path]
) -> Callable[[str], tuple[LoadedRun, ort.InferenceSession]]:
    cache: dict[str, tuple[LoadedRun, ort.InferenceSession]] = {}

    def get(family: str) -> tuple[LoadedRun, ort.InferenceSession]:
        if family not in cache:
            cache[family] = (
                load_run(trained_run(family)),
                cpu_session(read_bundle(exported_bundle(family)).model_path),
            )
        return cache[family]

    return get


def _batch(model: Classifier, lengths: list[int], width: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, int(model.config.vocab_size), size=(len(lengths), width)).astype(np.int64)
    mask = (np.arange(width)[None, :] < np.asarray(lengths)[:, None]).astype(np.int64)
    return np.where(mask == 1, ids, int(model.config.pad_id)).astype(np.int64), mask


@pytest.mark.parametrize("family", FAMILIES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_torch_and_onnxruntime_agree_for_any_batch_length_and_padding(
    family: str, data: st.DataObject, loaded: Callable[[str], tuple[LoadedRun, ort.InferenceSession]]
) -> None:
    run, session = loaded(family)
    width = data.draw(st.integers(1, run.max_len), label="length")
    lengths = data.draw(st.lists(st.integers(0, width), min_size=1, max_size=12), label="row lengths")
    ids, mask = _batch(run.model, lengths, width, seed=data.draw(st.integers(0, 2**16), label="seed"))
    case = compare(run_torch(run.model, ids, mask), run_onnx(session, ids, mask), mask)
    assert case.problems == ()
    assert case.logits_diff <= DEFAULT_TOLERANCE
    if family in ATTENTION_FAMILIES:
        assert case.attention_diff is not None and case.attention_diff <= DEFAULT_TOLERANCE


@pytest.mark.parametrize("family", ATTENTION_FAMILIES)
def test_fully_padded_row_is_finite_with_zero_attention(
    family: str, loaded: Callable[[str], tuple[LoadedRun, ort.InferenceSession]]
) -> None:
    run, session = loaded(family)
    ids, mask = _batch(run.model, [5, 0, 2], 5, seed=3)
    out = run_onnx(session, ids, mask)
    assert np.isfinite(out.logits).all()
    assert out.attention is not None and np.isfinite(out.attention).all()
    assert not out.attention[1].any()  # nothing to attend to: all weights exactly 0
    keys = out.attention[2].reshape(-1, 5)
    assert not keys[:, 2:].any() and keys[:, :2].any()


@pytest.mark.slow  # the torch.export-based exporter takes several seconds per graph
def test_dynamo_exporter_also_passes_every_proof(trained_run: Callable[[str], Path], tmp_path: Path) -> None:
    run = load_run(trained_run("transformer"))
    contract = graph_contract(run.model)
    path = tmp_path / "dynamo.onnx"
    export_model(run.model, path, contract, opset=18, exporter="dynamo")
    verify_graph(path, contract)
    result = measure_parity(run.model, cpu_session(path), max_len=run.max_len)
    assert result.failures() == []


def test_a_graph_with_baked_in_sizes_is_caught(trained_run: Callable[[str], Path], tmp_path: Path) -> None:
    """Export without dynamic axes (the classic exporter failure) and check both proofs notice."""
    run = load_run(trained_run("attention_pool"))
    contract = graph_contract(run.model)
    path = tmp_path / "static.onnx"
    ids = torch.randint(1, int(run.model.config.vocab_size), (3, 7))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            run.model,
            (ids, torch.ones_like(ids)),
            str(path),
            dynamo=False,
            input_names=["input_ids", "attention_mask"],
            output_names=["logits", "attention"],
            opset_version=18,
        )
    with pytest.raises(ExportError, match=r"input 'input_ids' axis 0 is fixed at 3 .* baked"):
        verify_graph(path, contract)
    result = measure_parity(run.model, cpu_session(path), max_len=run.max_len)
    failures = result.failures()
    assert any("length 1: onnxruntime cannot run it" in failure for failure in failures), failures
    assert not any("batch 3, length 7:" in failure for failure in failures), failures
