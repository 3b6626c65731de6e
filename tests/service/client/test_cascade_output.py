"""The client's front ends on a cascade: `classify` says who answered, files get a column for it."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from attnserve.service.client import Client
from attnserve.service.client.cli import main
from tests.support.cascades import NAME, export_duo
from tests.support.servers import RunningServer, make_settings

TEXTS = ["hello there", "pizza with cheese", "good morning", "a bowl of soup"]


@pytest.fixture(scope="module")
def server(
    trained_run: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("cascade-client")
    export_duo(trained_run, root)
    with RunningServer(make_settings(root)) as running:
        yield running


def test_classify_prints_the_member(server: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    with Client(server.target, timeout=30) as client:
        expected = [r.answered_by for r in client.classify(TEXTS, model=NAME).results]
    assert main(["classify", "--target", server.target, "--model", NAME, "--json", *TEXTS]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert [r["answered_by"] for r in results] == expected
    assert main(["classify", "--target", server.target, "--model", NAME, TEXTS[0]]) == 0
    assert f"answered by the cascade's {expected[0]}" in capsys.readouterr().out


def test_file_rows_get_the_member_column(server: RunningServer, tmp_path: Path) -> None:
    source, target = tmp_path / "in.csv", tmp_path / "out.csv"
    source.write_text("text\n" + "\n".join(TEXTS) + "\n")
    with Client(server.target, timeout=30) as client:
        expected = [r.answered_by for r in client.classify(TEXTS, model=NAME).results]
        report = client.classify_file(source, target, model=NAME, batch_size=3, workers=1)
    assert report.rows_done == len(TEXTS)
    with target.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["answered_by"] for row in rows] == expected
