"""The int8 gate: accuracy on the run's test split (rows that chose nothing), named in the
bundle, and a golden-case tolerance declared before anything is measured."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from attnserve.export.cli import main
from attnserve.export.errors import ExportRequestError, QuantizationRefused
from attnserve.export.parity import run_torch
from attnserve.export.quantize import DEFAULT_INT8_TOLERANCE
from attnserve.export.writer import export_run
from attnserve.service.bundle import GateRows, read_bundle, sha256_file
from attnserve.training.run.checkpoint import EVAL_SET, TEST_SET, load_run
from attnserve.training.text.tokenizer import encode_batch, load_tokenizer


def _rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _labelled_by_the_model(run_dir: Path, path: Path) -> None:
    """Give every row of ``path`` the label the PyTorch model predicts for it: on those rows the
    float model scores exactly 1, whatever it scores on the validation split."""
    run = load_run(run_dir)
    rows = _rows(path)
    texts = [str(row["text"]) for row in rows]
    encoded = encode_batch(load_tokenizer(run.tokenizer_path), texts, run.max_len, run.truncation)
    predicted = run_torch(run.model, encoded.input_ids, encoded.attention_mask).logits.argmax(axis=1)
    relabelled = [{"text": text, "label": int(label)} for text, label in zip(texts, predicted, strict=True)]
    path.write_text("".join(json.dumps(row) + "\n" for row in relabelled), encoding="utf-8")


def test_the_gate_measures_the_test_split_and_the_manifest_names_it(
    trained_run: Callable[[str], Path], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(trained_run("transformer"), run_dir)
    validation = load_run(run_dir).metrics["val"]["accuracy"]
    assert validation < 1.0  # the tiny model misses some validation rows: they are not what is gated
    _labelled_by_the_model(run_dir, run_dir / TEST_SET)
    exported = export_run(run_dir, tmp_path / "models", "m", quantize="int8", max_accuracy_drop=1.0)
    bundle = read_bundle(exported)
    quantization = bundle.manifest.quantization
    assert quantization is not None and quantization.before == 1.0
    assert quantization.rows == GateRows(
        file=TEST_SET,
        split="test",
        rows=len(_rows(run_dir / TEST_SET)),
        sha256=sha256_file(run_dir / TEST_SET),
        seed=0,
    )
    # The golden cases still come from the validation split.
    validation_texts = {row["text"] for row in _rows(run_dir / EVAL_SET)}
    assert {case.text for case in bundle.manifest.golden} <= validation_texts


def test_a_run_without_a_test_split_is_not_quantized(
    trained_run: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(trained_run("mean_pool"), run_dir)
    (run_dir / TEST_SET).write_text("", encoding="utf-8")  # what a run with --test-fraction 0 leaves
    with pytest.raises(ExportRequestError, match=r"held-out rows.*test\.jsonl is missing or empty"):
        export_run(run_dir, tmp_path / "models", "m", quantize="int8")
    (run_dir / TEST_SET).unlink()  # a run written before the test split was kept
    argv = [str(run_dir), "--repository", str(tmp_path / "models"), "--name", "m", "--quantize", "int8"]
    assert main([*argv, "--no-latency"]) == 2
    assert "test.jsonl is missing or empty" in capsys.readouterr().err
    assert export_run(run_dir, tmp_path / "models", "m").name == "1"  # a float export needs no gate


def test_int8_golden_cases_carry_the_declared_tolerance(
    trained_run: Callable[[str], Path], tmp_path: Path
) -> None:
    run_dir = trained_run("self_attention")
    for declared in (DEFAULT_INT8_TOLERANCE, 0.75):
        path = export_run(
            run_dir, tmp_path, "m", quantize="int8", max_accuracy_drop=1.0, int8_tolerance=declared
        )
        manifest = read_bundle(path).manifest
        assert manifest.quantization is not None and manifest.quantization.tolerance == declared
        assert manifest.golden and {case.tolerance for case in manifest.golden} == {declared}


def test_int8_is_refused_when_the_golden_texts_stray_past_the_declared_tolerance(
    trained_run: Callable[[str], Path], tmp_path: Path
) -> None:
    with pytest.raises(QuantizationRefused, match=r"differs from PyTorch by .* declared tolerance 1e-06"):
        export_run(trained_run("self_attention"), tmp_path, "m", quantize="int8", int8_tolerance=1e-6)
    assert [p.name for p in (tmp_path / "m").iterdir() if not p.name.startswith(".")] == []
    with pytest.raises(ExportRequestError, match="int8 output tolerance must be a finite number > 0"):
        export_run(trained_run("self_attention"), tmp_path, "m", quantize="int8", int8_tolerance=np.inf)
