"""NVIDIA's perf_analyzer against models imported from Hugging Face folders: a multi-label
classifier (its V2 outputs include the BOOL `ASSIGNED`) and a regression model (`VALUE` in
place of `PROBABILITIES` and `LABEL`). perf_analyzer reads each model's configuration and
metadata, asks for every declared output and exits non-zero when any request fails; the
server's statistics confirm that every request succeeded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from attnserve.export.cli import main as export_main
from tests.support.problem_models import problem_folder
from tests.support.servers import RunningServer, make_settings
from tests.support.v2 import V2Calls, perf_analyzer_run

TEXTS = ["the film was good", "the music was dull and the plot was slow", "great cast!"]
MODELS = {
    "tags": (("sports", "arts", "news"), "multi_label_classification"),
    "score": (("rating",), "regression"),
}


@pytest.fixture(scope="module")
def imported_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("perf-imported")
    for seed, (name, (labels, problem)) in enumerate(MODELS.items()):
        folder = problem_folder(root / f"{name}-hf", labels, problem, seed, TEXTS)
        argv = [str(folder), "--repository", str(root / "models"), "--name", name, "--no-latency"]
        assert export_main(argv) == 0
    with RunningServer(make_settings(root / "models")) as running:
        yield running


@pytest.mark.parametrize("model", sorted(MODELS))
def test_perf_analyzer_measures_an_imported_model_without_errors(
    imported_server: RunningServer, perf_analyzer: Path, tmp_path: Path, model: str
) -> None:
    data = tmp_path / "text.json"
    data.write_text(json.dumps({"data": [{"TEXT": [text]} for text in TEXTS]}))
    report = tmp_path / "report.csv"
    calls = V2Calls(imported_server.target)
    try:
        before = calls.statistics(model)
        row = perf_analyzer_run(
            perf_analyzer, model, imported_server.target, ["--input-data", str(data)], report
        )
        assert float(row["Inferences/Second"]) > 0
        after = calls.statistics(model)
    finally:
        calls.close()
    assert after.inference_stats.success.count > before.inference_stats.success.count
    assert after.inference_stats.fail.count == before.inference_stats.fail.count
