"""NVIDIA's perf_analyzer (the binary in the tritonclient 2.41 wheel) against attnserve.

Each run is brief: one concurrency level, 0.5 s measurement windows, stability loosened so
two CPU cores shared with the server still settle within a few windows. perf_analyzer
exits non-zero when any request fails, so a zero exit plus throughput in its CSV is the
check; the server's own statistics confirm that nothing failed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.servers import RunningServer
from tests.support.v2 import V2Calls, perf_analyzer_run, tokenize

MODEL = "car"
TEXTS = [
    "the white car is on the left of the black car",
    "the red car is behind the blue car",
    "a green car is in front of the yellow car",
]
WIDTH = 16  # INPUT_IDS / ATTENTION_MASK columns, given to perf_analyzer with --shape


@pytest.fixture(scope="module")
def input_files(tmp_path_factory: pytest.TempPathFactory, model_repository: Path) -> dict[str, list[str]]:
    """perf_analyzer arguments for each input form: TEXT, or INPUT_IDS + ATTENTION_MASK."""
    folder = tmp_path_factory.mktemp("perf-input")
    text_file = folder / "text.json"
    text_file.write_text(json.dumps({"data": [{"TEXT": [text]} for text in TEXTS]}))
    ids, mask = tokenize(model_repository / MODEL / "1" / "tokenizer.json", TEXTS)
    assert ids.shape[1] <= WIDTH
    rows = [
        {
            "INPUT_IDS": row_ids.tolist() + [0] * (WIDTH - len(row_ids)),
            "ATTENTION_MASK": row_mask.tolist() + [0] * (WIDTH - len(row_mask)),
        }
        for row_ids, row_mask in zip(ids, mask, strict=True)
    ]
    ids_file = folder / "ids.json"
    ids_file.write_text(json.dumps({"data": rows}))
    shapes = ["--shape", f"INPUT_IDS:{WIDTH}", "--shape", f"ATTENTION_MASK:{WIDTH}"]
    return {"text": ["--input-data", str(text_file)], "ids": ["--input-data", str(ids_file), *shapes]}


@pytest.mark.parametrize("mode", ["sync", "async", "streaming"])
@pytest.mark.parametrize("inputs", ["text", "ids"])
def test_perf_analyzer_measures_throughput_without_errors(
    server: RunningServer,
    v2: V2Calls,
    perf_analyzer: Path,
    input_files: dict[str, list[str]],
    tmp_path: Path,
    inputs: str,
    mode: str,
) -> None:
    report = tmp_path / "report.csv"
    flags = {"sync": ["--sync"], "async": ["--async"], "streaming": ["--streaming"]}[mode]
    before = v2.statistics(MODEL)
    row = perf_analyzer_run(perf_analyzer, MODEL, server.target, [*input_files[inputs], *flags], report)
    assert row["Concurrency"] == "2"
    assert float(row["Inferences/Second"]) > 0
    assert float(row["p99 latency"]) > 0
    after = v2.statistics(MODEL)
    assert after.inference_stats.success.count > before.inference_stats.success.count
    assert after.inference_stats.fail.count == before.inference_stats.fail.count
    assert after.inference_count > before.inference_count
