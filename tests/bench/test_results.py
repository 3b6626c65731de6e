"""The serving suite's results.json reads back as the objects it was written from, so
`python -m bench --from RUN_DIR` renders any earlier run again: memory and text length included."""

from __future__ import annotations

from pathlib import Path

from bench.serving.ceiling import CeilingRow
from bench.serving.report import render
from bench.serving.results import Memory, Results, RssSample, SeqLen
from kit.results import Point


def test_a_run_with_every_section_reads_back_and_renders_the_same(tmp_path: Path) -> None:
    machine = {"cpu": "cpu", "cores": 2, "memory_gib": 4.0, "load_average": [0.1, 0.2], "os": "Linux",
               "python": "3.11", "packages": {"onnxruntime": "1", "grpcio": "1"}, "commit": "a"}  # fmt: skip
    model = {"name": "car", "version": 1, "family": "transformer", "attention": "layers 1x2", "max_len": 32}
    point = Point("attnserve native", 4, 100.0, 1.0, 2.0, texts_per_s=100.0)
    memory = Memory(idle_mb=50.0, requests=10, samples=[RssSample("idle", 0.5, 50.0)])
    seqlen = SeqLen({8: 900.0}, {8: point}, {"length buckets": 800.0})
    results = Results("tiny", "2026-01-01 00:00 UTC", machine, model, [CeilingRow(1, 32, 9.0, 8.0, 7.0)],
                      [point], memory, seqlen, command="python -m bench")  # fmt: skip
    results.write(tmp_path / "results.json")
    again = Results.read(tmp_path / "results.json")
    assert again.memory is not None and again.memory.samples == memory.samples
    assert again.seqlen is not None and again.seqlen.service[8].texts_per_s == 100.0
    again.write(tmp_path / "again.json")  # a point's unmeasured figures are nan: compare as written
    assert (tmp_path / "again.json").read_text() == (tmp_path / "results.json").read_text()
    report = render(again, 4)
    assert report == render(results, 4) and "## 6. Memory" in report and "## 7. Text length" in report
