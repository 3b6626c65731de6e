"""Multi-label and regression models through the client side, against a real server serving
the shipped car-order bundle three ways: as it is (single-label), as a multi-label model
(bundle.json's `scoring` edited in) and as a regression model (its graph cut to one output):
the sync and asyncio clients, `attnserve-client classify` and `models`, and the file tool."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from attnserve.service.client import AsyncClient, Client, FileJob, classify_file
from attnserve.service.client.cli import main as client_main
from attnserve.service.client.messages import TextResult
from attnserve.service.client.scores import NONE_ASSIGNED, Scoring, scores_view
from tests.support.scoring_bundles import (
    MULTI,
    REGRESSION,
    VALUE_LABEL,
    golden_texts,
    multi_label_bundle,
    regression_bundle,
    sigmoid,
)
from tests.support.servers import RunningServer, make_settings
from tests.support.shipped import NAME, SHIPPED

# negative >= 0.99, positive >= 0.5: among the golden texts, some get negative, one positive and
# one (p(negative) 0.9899) none at all.
THRESHOLDS = [0.99, 0.5]
LABELS = ["negative", "positive"]
TEXTS = [*golden_texts(SHIPPED / "1"), "the white car is on the left of the black car"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repository = tmp_path_factory.mktemp("scores") / "models"
    shutil.copytree(SHIPPED / "1", repository / NAME / "1")
    multi_label_bundle(repository, THRESHOLDS)
    regression_bundle(repository)
    with RunningServer(make_settings(repository)) as running:
        yield running


def expected_assigned(logits: np.ndarray) -> list[str]:
    """The labels whose sigmoid is at or over their threshold, in label order."""
    chosen = sigmoid(logits) >= np.asarray(THRESHOLDS, np.float32)
    return [label for label, on in zip(LABELS, chosen.tolist(), strict=True) if on]


def run_cli(server: RunningServer, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = client_main(["--target", server.target, *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


# --- the client library --------------------------------------------------------------------
def test_model_info_says_what_the_scores_mean(client: Client) -> None:
    multi, regression, single = client.model(MULTI), client.model(REGRESSION), client.model(NAME)
    assert multi.problem_type == "multi_label_classification"
    assert multi.thresholds == pytest.approx(THRESHOLDS)
    assert regression.problem_type == "regression" and regression.thresholds == []
    assert regression.labels == [VALUE_LABEL]
    assert single.problem_type == "single_label_classification" and single.thresholds == []


def test_multi_label_assigns_the_labels_at_or_over_their_thresholds(client: Client) -> None:
    reply = client.classify(TEXTS, model=MULTI)
    for result in reply.results:
        assert result.probabilities == pytest.approx(sigmoid(result.logits), abs=1e-6)
        assert result.assigned == expected_assigned(result.logits)
        assert result.value is None
    sets = [tuple(result.assigned) for result in reply.results]
    # The thresholds were chosen so that both labels and no label at all occur.
    assert ("negative",) in sets and ("positive",) in sets and () in sets


def test_regression_gives_a_value_and_no_probabilities(client: Client) -> None:
    reply = client.classify(TEXTS, model=REGRESSION)
    single = client.classify(TEXTS, model=NAME)
    for result, whole in zip(reply.results, single.results, strict=True):
        assert result.value == pytest.approx(float(whole.logits[0]), abs=1e-4)  # the graph's first logit
        assert result.probabilities.size == 0 and result.assigned == []
        assert result.label == VALUE_LABEL
    for result in single.results:
        assert result.value is None and result.assigned == []


def attributed(result: TextResult) -> np.ndarray:
    assert result.attribution is not None
    return result.attribution


def test_the_attribution_explains_the_label_asked(client: Client, server: RunningServer) -> None:
    text = TEXTS[1]
    own = client.classify(text, model=MULTI, attribution="occlusion").results[0]
    asked = {
        label: client.classify(text, model=MULTI, attribution="occlusion", attribution_label=label).results[0]
        for label in LABELS
    }
    np.testing.assert_allclose(attributed(asked[own.label]), attributed(own), atol=1e-6)
    other = next(label for label in LABELS if label != own.label)
    assert not np.allclose(attributed(asked[other]), attributed(own), atol=1e-3)

    async def by_asyncio() -> TextResult:
        async with AsyncClient(server.target) as connected:
            reply = await connected.classify(
                text, model=MULTI, attribution="occlusion", attribution_label=other
            )
            return reply.results[0]

    np.testing.assert_allclose(attributed(asyncio.run(by_asyncio())), attributed(asked[other]), atol=1e-6)


# --- attnserve-client ----------------------------------------------------------------------
def table_rows(out: str) -> dict[str, list[str]]:
    """The rows of the piped scores tables: label -> its other cells."""
    rows: dict[str, list[str]] = {}
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.split("│")]
        if len(cells) >= 2 and cells[0] in LABELS:
            rows.setdefault(cells[0], cells[1:])
    return rows


def test_cli_marks_the_assigned_labels_beside_each_threshold(
    client: Client, server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    for text, result in zip(TEXTS, client.classify(TEXTS, model=MULTI).results, strict=True):
        out = run_cli(server, capsys, "classify", text, "--model", MULTI, "--attention", "none")
        assert re.search(r"label\s*┃\s*probability\s*┃\s*threshold\s*┃\s*assigned", out)
        rows = table_rows(out)
        assert list(rows) == LABELS  # label order, not by probability
        for label, threshold, p in zip(LABELS, THRESHOLDS, result.probabilities.tolist(), strict=True):
            cells = rows[label]
            assert float(cells[0]) == pytest.approx(p, abs=1e-4)
            assert float(cells[1]) == pytest.approx(threshold)
            assert (cells[2] == "yes") == (label in result.assigned)
        if result.assigned:
            assert f"assigned: {', '.join(result.assigned)}" in out and NONE_ASSIGNED not in out
        else:
            assert NONE_ASSIGNED in out


def test_cli_shows_a_regression_value_without_probabilities(
    client: Client, server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    value = client.classify(TEXTS[0], model=REGRESSION).results[0].value
    assert value is not None
    out = run_cli(server, capsys, "classify", TEXTS[0], "--model", REGRESSION, "--attribution", "occlusion")
    assert f"value: {value:.4f}" in out
    assert "probability" not in out and "threshold" not in out
    assert "what each word does to the value" in out


def test_cli_json_carries_assigned_and_value(
    client: Client, server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["classify", *TEXTS, "--attention", "none", "--json"]
    multi = json.loads(run_cli(server, capsys, *args, "--model", MULTI))["results"]
    reply = client.classify(TEXTS, model=MULTI)
    assert [r["assigned"] for r in multi] == [result.assigned for result in reply.results]
    assert all("value" not in r for r in multi)
    regression = json.loads(run_cli(server, capsys, *args, "--model", REGRESSION))["results"]
    assert all(r["probabilities"] == [] and isinstance(r["value"], float) for r in regression)
    assert all("assigned" not in r for r in regression)
    single = json.loads(run_cli(server, capsys, *args, "--model", NAME))["results"]
    assert all("assigned" not in r and "value" not in r for r in single)


def test_cli_attribution_label(server: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_cli(
        server, capsys, "classify", TEXTS[0], "--model", MULTI, "--attention", "none",
        "--attribution", "occlusion", "--attribution-label", "positive",
    )  # fmt: skip
    assert "what each word does to p(positive)" in out
    with pytest.raises(SystemExit) as usage:
        client_main(["--target", server.target, "classify", "a car", "--attribution-label", "positive"])
    assert usage.value.code == 2
    assert "--attribution-label names the label an --attribution explains" in capsys.readouterr().err
    code = client_main(
        ["--target", server.target, "classify", "a car", "--model", MULTI,
         "--attribution", "occlusion", "--attribution-label", "nope"]
    )  # fmt: skip
    assert code == 1 and "INVALID_ARGUMENT" in capsys.readouterr().err


def test_cli_models_say_problem_type_and_thresholds(
    server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_cli(server, capsys, "models")
    assert "multi-label: negative>=0.99, positive>=0.5" in out
    assert re.search(r"│ regression\s+│", out) and "single-label" in out
    described = {m["name"]: m for m in json.loads(run_cli(server, capsys, "models", "--json"))}
    assert described[MULTI]["problem_type"] == "multi_label_classification"
    assert described[MULTI]["thresholds"] == pytest.approx(THRESHOLDS)
    assert described[REGRESSION]["problem_type"] == "regression"


def test_regression_rendering_at_the_function_level() -> None:
    result = TextResult(
        label=VALUE_LABEL, label_id=0, probabilities=np.zeros(0, np.float32),
        logits=np.asarray([2.5], np.float32), tokens=[], truncated=False, attention=None,
        top_tokens=[], value=2.5,
    )  # fmt: skip
    out = Console(width=200, record=True, file=io.StringIO())
    for part in scores_view(result, [VALUE_LABEL], Scoring("regression")):
        out.print(part)
    text = out.export_text()
    assert text.strip() == "value: 2.5000" and "probability" not in text


# --- the file tool -------------------------------------------------------------------------
def write_input(path: Path) -> None:
    data = [{"id": i, "text": text} for i, text in enumerate(TEXTS)]
    if path.suffix == ".csv":
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=["id", "text"])
            writer.writeheader()
            writer.writerows(data)
    else:
        pq.write_table(pa.Table.from_pylist(data), path)


def read_output(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    if path.suffix == ".csv":
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            return list(reader.fieldnames or []), list(reader)
    table = pq.read_table(path)
    return table.column_names, table.to_pylist()


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_file_tool_multi_label_columns(client: Client, tmp_path: Path, suffix: str) -> None:
    source, target = tmp_path / f"in{suffix}", tmp_path / f"out{suffix}"
    write_input(source)
    report = classify_file(client, FileJob(source, target, model=MULTI))
    assert report.stopped is None and report.rejected == 0
    columns, rows = read_output(target)
    assert columns == ["id", "text", "p_negative", "p_positive", "assigned"]
    reply = client.classify(TEXTS, model=MULTI)
    for row, result in zip(rows, reply.results, strict=True):
        assert row["assigned"] == "|".join(expected_assigned(result.logits))
        probabilities = [float(row["p_negative"]), float(row["p_positive"])]
        assert probabilities == pytest.approx(result.probabilities.tolist(), abs=1e-5)
    assert {row["assigned"] for row in rows} >= {"negative", "positive", ""}
    if suffix == ".parquet":
        schema = pq.read_schema(target)
        assert schema.field("assigned").type == pa.string()
        assert schema.field("p_positive").type == pa.float64()


def test_file_tool_regression_value_column(
    client: Client, server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = tmp_path / "in.csv", tmp_path / "out.csv"
    write_input(source)
    code = client_main(
        ["--target", server.target, "classify", "--input", str(source), "--output", str(target),
         "--model", REGRESSION, "--prefix", "pred_"]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    columns, rows = read_output(target)
    assert columns == ["id", "text", "pred_value"]
    reply = client.classify(TEXTS, model=REGRESSION)
    values = [result.value for result in reply.results]
    assert [float(row["pred_value"]) for row in rows] == pytest.approx(values, abs=1e-5)


def test_file_tool_single_label_columns_are_unchanged(client: Client, tmp_path: Path) -> None:
    source, target = tmp_path / "in.csv", tmp_path / "out.csv"
    write_input(source)
    classify_file(client, FileJob(source, target, model=NAME))
    columns, rows = read_output(target)
    assert columns == ["id", "text", "label", "p_negative", "p_positive"]
    assert {row["label"] for row in rows} <= set(LABELS)
