"""Temperature scaling at export: the fit on logits made here, and `attnserve-export calibrate`
on a real bundle, whose next version reads back with the temperature and its figures."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from attnserve.export.calibration import (
    MIN_ROWS,
    CalibrationError,
    RowsName,
    calibrate,
    ece,
    fit_temperature,
    nll,
)
from attnserve.export.cli import main
from attnserve.export.evalset import graph_logits
from attnserve.export.parity import cpu_session
from attnserve.service.bundle import MANIFEST_FILE, read_bundle, sha256_file, softmax

ROWS = RowsName(file="rows.jsonl", split="rows", sha256="0" * 64)


def _labelled(scale: float, n: int = 4000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Logits whose softmax is calibrated by construction (each label drawn from it), times `scale`."""
    rng = np.random.default_rng(seed)
    true = rng.normal(0.0, 2.0, size=(n, 3)).astype(np.float32)
    p = softmax(true).astype(np.float64)
    drawn = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    labels = np.minimum(drawn, 2).astype(np.int64)  # a cumsum that rounds under 1 must not give 3
    return (true * scale).astype(np.float32), labels


@pytest.mark.parametrize("scale", [3.0, 0.5])  # over- and underconfident
def test_the_fitted_temperature_undoes_the_scale_and_lowers_nll_and_ece(scale: float) -> None:
    logits, labels = _labelled(scale)
    temperature = fit_temperature(logits, labels)
    assert temperature == pytest.approx(scale, rel=0.1)
    record = calibrate(logits, labels, ROWS, "model.onnx")
    assert record.temperature == pytest.approx(temperature, abs=1e-6)
    assert record.nll_after < record.nll_before
    assert record.ece_after < record.ece_before / 3
    assert record.ece_after < 0.03
    assert record.ece_after == pytest.approx(ece(softmax(logits, record.temperature), labels))
    assert record.nll_after == pytest.approx(nll(logits, labels, record.temperature))
    assert (record.confidence_after < record.confidence_before) == (scale > 1)
    assert record.rows == len(labels) and record.bins == 15


def test_ece_is_the_share_weighted_gap_in_equal_width_bins() -> None:
    # Confidences 0.95, 0.95 (one right) in the (14/15, 1] bin; 0.6 (right) in (8/15, 9/15].
    probabilities = np.asarray([[0.95, 0.05], [0.95, 0.05], [0.4, 0.6]], dtype=np.float32)
    labels = np.asarray([0, 1, 1])
    expected = 2 / 3 * abs(0.5 - 0.95) + 1 / 3 * abs(1.0 - 0.6)
    assert ece(probabilities, labels) == pytest.approx(expected, abs=1e-6)
    assert ece(probabilities, labels, bins=1) == pytest.approx(abs(2 / 3 - (0.95 + 0.95 + 0.6) / 3), abs=1e-6)


def test_rows_that_place_no_temperature_are_refused() -> None:
    logits, labels = _labelled(1.0, n=200)
    with pytest.raises(CalibrationError, match="at least"):
        fit_temperature(logits[: MIN_ROWS - 1], labels[: MIN_ROWS - 1])
    right = logits.argmax(axis=1)  # every row right: sharper is always better
    with pytest.raises(CalibrationError, match="too few rows wrong"):
        fit_temperature(logits, right)
    wrong = (right + 1) % 3  # every row wrong: the flatter the better
    with pytest.raises(CalibrationError, match="barely tells the labels apart"):
        fit_temperature(logits, wrong)


def test_a_temperature_that_would_raise_the_ece_on_its_own_rows_is_refused() -> None:
    # Two labels, half the rows right: the right ones a little surer than the wrong ones. NLL
    # is lowest at a sharper T, yet the binned error of that T is worse than T = 1's.
    rng = np.random.default_rng(0)
    right = rng.random(200) < 0.5
    margin = np.abs(np.where(right, rng.normal(0.6, 0.3, 200), rng.normal(0.2, 0.2, 200)))
    logits = np.stack([margin / 2, -margin / 2], axis=1).astype(np.float32)
    labels = np.where(right, 0, 1).astype(np.int64)
    temperature = fit_temperature(logits, labels)
    assert nll(logits, labels, temperature) < nll(logits, labels, 1.0)
    assert ece(softmax(logits, temperature), labels) > ece(softmax(logits), labels)
    with pytest.raises(CalibrationError, match="raise the calibration error"):
        calibrate(logits, labels, ROWS, "model.onnx")


def _texts(count: int) -> list[str]:
    words = ["hello", "pizza", "good", "morning", "cheese", "bread", "hi", "there", "soup", "evening"]
    return [f"{a} {b} {c}" for a in words for b in words for c in ("now", "later")][:count]


def _rows_file(bundle: Path, path: Path) -> np.ndarray:
    """80 texts labelled with the bundle's own answer, every fifth one flipped: rows on which
    its model is right and wrong, so a temperature has a minimum. Returns the labels."""
    manifest = read_bundle(bundle).manifest
    texts = _texts(80)
    logits = graph_logits(cpu_session(bundle / "model.onnx"), bundle / "tokenizer.json", texts,
                          manifest.max_len, manifest.truncation)  # fmt: skip
    labels: np.ndarray = logits.argmax(axis=1)
    labels[::5] = 1 - labels[::5]
    lines = [
        json.dumps({"text": t, "label": manifest.labels[int(y)]}) for t, y in zip(texts, labels, strict=True)
    ]
    path.write_text("\n".join(lines) + "\n")
    return labels


def test_calibrate_publishes_the_next_version_with_the_same_graphs(
    exported_bundle: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "models" / "greet" / "1"
    shutil.copytree(exported_bundle("transformer"), source)
    raw = json.loads((source / MANIFEST_FILE).read_text())
    raw["name"] = "greet"
    (source / MANIFEST_FILE).write_text(json.dumps(raw))
    rows = tmp_path / "rows.jsonl"
    _rows_file(source, rows)
    assert main(["calibrate", str(source), "--rows", str(rows)]) == 0, capsys.readouterr().err
    assert "ECE" in capsys.readouterr().out
    written = read_bundle(tmp_path / "models" / "greet" / "2", expect_name="greet", expect_version=2)
    old = read_bundle(source).manifest
    new = written.manifest
    assert new.files == old.files  # the graphs and tokenizer, byte for byte
    for name in new.files:
        assert sha256_file(written.root / name) == sha256_file(source / name)
    calibration = new.calibration
    assert calibration is not None and calibration.temperature > 0
    assert (calibration.file, calibration.split, calibration.rows) == ("rows.jsonl", "rows", 80)
    assert calibration.ece_after <= calibration.ece_before
    assert calibration.sha256 == sha256_file(rows)
    assert calibration.nll_after < calibration.nll_before
    assert new.golden == old.golden
    # The drift reference is remeasured at the new temperature, on the rows.
    assert new.data_profile is not None and new.data_profile.texts == 80
    # --measure reads the figures back from the written version, at its temperature.
    assert main(["calibrate", str(written.root), "--rows", str(rows), "--measure"]) == 0
    out = capsys.readouterr().out
    assert f"{calibration.ece_after:.4f}" in out and f"{calibration.ece_before:.4f}" in out
    assert not [p for p in (tmp_path / "models" / "greet").iterdir() if p.name.startswith(".staging")]


def test_calibrate_reads_csv_with_named_columns_and_refuses_unknown_labels(
    exported_bundle: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "models" / "transformer" / "1"
    shutil.copytree(exported_bundle("transformer"), source)
    jsonl = tmp_path / "rows.jsonl"
    labels = _rows_file(source, jsonl)
    names = read_bundle(source).manifest.labels
    texts = [json.loads(line)["text"] for line in jsonl.read_text().splitlines()]
    csv = tmp_path / "rows.csv"
    lines = [f"{t},{names[int(y)]}" for t, y in zip(texts, labels, strict=True)]
    csv.write_text("sentence,gold\n" + "\n".join(lines) + "\n")
    argv = [
        "calibrate",
        str(source),
        "--rows",
        str(csv),
        "--text-column",
        "sentence",
        "--label-column",
        "gold",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    from_csv = read_bundle(tmp_path / "models" / "transformer" / "2").manifest.calibration
    assert from_csv is not None and from_csv.rows == 80
    csv.write_text("sentence,gold\nhello there,neither\n")
    assert main(argv) == 2
    assert "'neither' is neither one of" in capsys.readouterr().err
    assert not (tmp_path / "models" / "transformer" / "3").exists()


def test_export_fits_the_temperature_on_the_validation_split(
    trained_run: Callable[[str], Path],
    exported_bundle: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The run's validation split replaced by 80 texts the model gets right and wrong.
    run = Path(shutil.copytree(trained_run("transformer"), tmp_path / "run"))
    rows = tmp_path / "rows.jsonl"
    _rows_file(exported_bundle("transformer"), rows)
    names = read_bundle(exported_bundle("transformer")).manifest.labels
    lines = [json.loads(line) for line in rows.read_text().splitlines()]
    (run / "eval.jsonl").write_text(
        "".join(json.dumps({"text": r["text"], "label": names.index(r["label"])}) + "\n" for r in lines)
    )
    argv = [str(run), "--repository", str(tmp_path / "models"), "--name", "m", "--no-latency"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "ECE" in capsys.readouterr().out
    bundle = read_bundle(tmp_path / "models" / "m" / "1")
    calibration = bundle.manifest.calibration
    assert calibration is not None
    assert (calibration.file, calibration.split, calibration.rows) == ("eval.jsonl", "validation", 80)
    assert calibration.sha256 == sha256_file(run / "eval.jsonl")
    # Recomputed here from the written model.onnx on those rows: the same T and figures.
    manifest = bundle.manifest
    texts = [r["text"] for r in lines]
    labels = np.asarray([names.index(r["label"]) for r in lines])
    logits = graph_logits(cpu_session(bundle.model_path), bundle.tokenizer_path, texts, manifest.max_len,
                          manifest.truncation)  # fmt: skip
    assert (
        calibrate(logits, labels, RowsName("eval.jsonl", "validation", calibration.sha256), "model.onnx")
        == calibration
    )
    # The drift reference holds the confidences the server will see: at that temperature.
    assert manifest.data_profile is not None
    served = softmax(logits, calibration.temperature).max(axis=1).mean()
    assert manifest.data_profile.confidence_mean == pytest.approx(float(served), abs=1e-5)
    assert main([*argv, "--no-calibration"]) == 0
    assert read_bundle(tmp_path / "models" / "m" / "2").manifest.calibration is None
