"""`python -m bench encoder --tiny` on a tiny BERT exported float and int8, beside the expert's int8
graph, on texts from a CSV: every figure written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnserve.export.parity import torch_threads
from attnserve.export.writer import export_run
from bench.cli import main
from tests.support.tiny_bert import train_tiny_encoder_run


@pytest.mark.slow  # a tiny BERT trained and exported twice, two servers: about 10 s
def test_the_encoder_section_measures_both_forms_raw_and_served(tmp_path: Path) -> None:
    with torch_threads(1):
        run = train_tiny_encoder_run(tmp_path / "train")
    repository = tmp_path / "models"
    export_run(run, repository, "bert")
    export_run(run, repository, "bert-int8", quantize="int8")
    out = tmp_path / "encoder.json"
    texts = tmp_path / "dev.csv"
    texts.write_text("sentence,label\nthe plot was superb,1\na dull film,0\nlovely,1\n")
    argv = ["encoder", "--tiny", "--repository", str(repository), "--model", "bert",
            "--int8-model", "bert-int8", "--texts", str(texts), "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    results = json.loads(out.read_text())
    # The expert's graph (logits only, int8 per channel) is measured beside the float bundle.
    assert [r["model"] for r in results["raw"]] == ["bert", "bert expert int8", "bert-int8"]
    assert all(r["single_p50_ms"] > 0 and r["batch_texts_per_s"] > 0 for r in results["raw"])
    points = {(p["system"], p["texts"], p["concurrency"]) for p in results["served"]}
    assert points == {(m, n, c) for m in ("bert", "bert-int8") for n, c in ((1, 1), (1, 2), (4, 1))}
    assert all(p["texts_per_s"] > 0 and not p["errors"] for p in results["served"])
    assert all(m["peak_rss_mb"] > 0 for m in results["memory"])


def test_a_missing_model_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "models").mkdir()
    assert main(["encoder", "--tiny", "--repository", str(tmp_path / "models"), "--model", "nope"]) == 2
    assert "nope" in capsys.readouterr().err
