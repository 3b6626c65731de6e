"""`attnserve-export`: a report on success, a non-zero exit naming the mismatch on failure."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from attnserve.export.cli import main
from attnserve.service.bundle import read_bundle


def _published(model_dir: Path) -> list[str]:
    return (
        sorted(p.name for p in model_dir.iterdir() if not p.name.startswith("."))
        if model_dir.exists()
        else []
    )


def test_cli_exports_and_reports(
    trained_run: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = trained_run("transformer")
    rc = main([str(run_dir), "--repository", str(tmp_path), "--name", "cars", "--version", "3"])
    out = capsys.readouterr().out
    assert rc == 0
    assert read_bundle(tmp_path / "cars" / "3").manifest.version == 3
    for expected in (
        "cars version 3",
        "model.onnx",
        "tokenizer.json",
        "bundle.json",
        "logits max |Δ|",
        "attention max |Δ|",
        "onnxruntime speed-up",
        "golden cases match",
    ):
        assert expected in out, expected


def test_cli_fails_loudly_when_parity_fails(
    trained_run: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(
        [
            str(trained_run("transformer")),
            "--repository",
            str(tmp_path),
            "--name",
            "cars",
            "--tolerance",
            "1e-12",
            "--no-latency",
        ]
    )
    err = " ".join(capsys.readouterr().err.split())
    assert rc != 0
    assert "export failed" in err and "logits differ by" in err and "tolerance 1e-12" in err
    assert _published(tmp_path / "cars") == []


def test_cli_refuses_int8_past_the_accuracy_threshold(
    trained_run: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(
        [
            str(trained_run("attention_pool")),
            "--repository",
            str(tmp_path),
            "--name",
            "m",
            "--quantize",
            "int8",
            "--max-accuracy-drop",
            "-1",
            "--no-latency",
        ]
    )
    err = " ".join(capsys.readouterr().err.split())
    assert rc != 0 and "int8 quantization refused" in err
    assert _published(tmp_path / "m") == []


def test_cli_refuses_to_overwrite_and_names_a_bad_run(
    trained_run: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = str(trained_run("bow_mlp"))
    assert main([run_dir, "--repository", str(tmp_path), "--name", "m", "--no-latency"]) == 0
    before = (tmp_path / "m" / "1" / "bundle.json").read_bytes()
    assert (
        main([run_dir, "--repository", str(tmp_path), "--name", "m", "--version", "1", "--no-latency"]) != 0
    )
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "m" / "1" / "bundle.json").read_bytes() == before

    assert main([str(tmp_path / "no-run"), "--repository", str(tmp_path), "--name", "x"]) != 0
    assert "checkpoint.pt not found" in " ".join(capsys.readouterr().err.split())
