"""`attnserve-train compare`: real training processes, one page with every run's figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnserve.training.cli.compare import parse_family
from attnserve.training.cli.exits import UsageError
from attnserve.training.cli.main import main
from attnserve.training.report.comparison import Run, RunSpec, _findings


def test_family_specs_are_parsed_and_checked() -> None:
    spec = parse_family("attention_pool:positions=sinusoidal,d_model=32")
    assert spec.family == "attention_pool"
    assert spec.settings == (("positions", "sinusoidal"), ("d_model", "32"))
    assert spec.label == "attention_pool positions=sinusoidal d_model=32"
    with pytest.raises(UsageError, match="unknown family 'lstm'"):
        parse_family("lstm")
    with pytest.raises(UsageError, match="name=value"):
        parse_family("attention_pool:sinusoidal")


@pytest.mark.timeout(900)  # four training processes; each imports torch afresh
def test_compare_writes_a_page_with_reports_time_and_memory(tmp_path: Path) -> None:
    page = tmp_path / "reviews.md"
    argv = [
        "compare", "--task", "reviews-polarity", "--out", str(tmp_path / "runs"), "--table", str(page),
        "--families", "mean_pool", "attention_pool:positions=sinusoidal", "--distractor", "both",
        "--size", "150", "--epochs", "1", "--max-len", "48", "--truncation", "tail", "--no-progress",
    ]  # fmt: skip
    assert main(argv) == 0
    text = page.read_text()
    assert "Produced by `attnserve-train compare --task reviews-polarity" in text
    assert "max_len 48 (set), keeping the tail" in text
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert [r.split(" | ")[0:2] for r in rows] == [
        ["| `mean_pool`", "no"],
        ["| `attention_pool positions=sinusoidal`", "no"],
        ["| `mean_pool`", "yes"],
        ["| `attention_pool positions=sinusoidal`", "yes"],
    ]
    metrics = json.loads((tmp_path / "runs" / "mean_pool+distractor" / "seed0" / "metrics.json").read_text())
    assert metrics["task"] == "reviews-polarity+distractor" and metrics["data"]["truncation"] == "tail"
    accuracy = f"{metrics['test']['accuracy']:.3f}"
    peak = f"{metrics['peak_rss_mb']:.0f}"
    assert rows[2].split(" | ")[2] == accuracy and rows[2].rstrip(" |").endswith(peak)
    assert "- without the distractor prefix: `attention_pool positions=sinusoidal`" in text
    assert "- the distractor costs `mean_pool`" in text
    assert text.count("Confusion matrix (rows: true class, columns: predicted)") == 4
    assert "| true \\ predicted | negative | positive |" in text

    # Finished runs with the same command are reused: the page is assembled without training.
    log = tmp_path / "runs" / "mean_pool" / "seed0" / "train.log"
    before = log.stat().st_mtime_ns
    page.unlink()
    assert main([*argv, "--reuse-runs"]) == 0
    assert log.stat().st_mtime_ns == before
    assert rows == [line for line in page.read_text().splitlines() if line.startswith("| `")]


def test_findings_credit_attention_only_to_families_that_have_it(tmp_path: Path) -> None:
    def run(family: str, accuracy: float) -> Run:
        metrics = {"test": {"accuracy": accuracy, "n": 1000}}
        return Run(RunSpec(family), False, 0, metrics, {}, tmp_path)

    lines = _findings([run("mean_pool", 0.5), run("transformer", 0.97), run("bow_mlp", 0.5)])
    assert lines == [
        "- without the distractor prefix: `transformer` 0.970 vs `mean_pool` 0.500 (+0.470): "
        "attention helps (beyond two standard errors, 0.033).",
        "- without the distractor prefix: `bow_mlp` 0.500 vs `mean_pool` 0.500 (+0.000): "
        "`bow_mlp` (no attention) makes no clear difference (within two standard errors, 0.045).",
    ]
