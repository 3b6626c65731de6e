"""File jobs that cannot mix: a --resume with another model, another version behind `latest`,
or any flag that shapes the output is refused with what differs, and leaves the rows done
untouched; JSONL lines that cannot be read are rejected; Parquet output keeps every key;
JSONL and Parquet output resumed after a stop at a fixed row count."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from attnserve.service.client import Client, FileJob, classify_file
from tests.service.client.conftest import rejects_of
from tests.service.client.test_files import cli, read_rows, rows, write_rows
from tests.support.bundles import add_version
from tests.support.servers import RunningServer, make_settings
from tests.support.shipped import shipped_repository


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with RunningServer(make_settings(shipped_repository(tmp_path_factory.mktemp("shipped")))) as running:
        yield running


def stopped_after_eight_rows(client: Client, source: Path, target: Path, model: str = "") -> None:
    """A first run that stops after its first two batches of four (one call at a time)."""
    job = FileJob(source, target, model=model, batch_size=4, workers=1, stop_after=8)
    report = classify_file(client, job)
    assert (report.rows_done, report.stopped) == (8, "stopped")


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--prefix", "pred_"], "--prefix: '' then, 'pred_' now"),
        (["--with-attention"], "--with-attention: False then, True now"),
        (["--output-format", "jsonl"], "--output-format: 'csv' then, 'jsonl' now"),
        (["--rejects", "elsewhere.jsonl"], "--rejects: "),
    ],
    ids=["prefix", "with-attention", "output-format", "rejects"],
)
def test_a_resume_with_another_output_flag_is_refused_and_names_it(
    server: RunningServer,
    client: Client,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    named: str,
) -> None:
    source, target = tmp_path / "in.csv", tmp_path / "out.csv"
    write_rows(source, rows(30))
    stopped_after_eight_rows(client, source, target)
    progress = tmp_path / "out.csv.progress.json"
    before = (target.read_bytes(), progress.read_bytes())
    files = ["--input", str(source), "--output", str(target)]
    capsys.readouterr()
    assert cli(server, *files, "--resume", *flags) == 2
    err = capsys.readouterr().err
    assert "cannot resume" in err and named in err and "--overwrite" in err
    assert (target.read_bytes(), progress.read_bytes()) == before  # the rows done are untouched
    assert cli(server, *files, "--resume") == 0  # the first run's flags carry on
    assert [int(row["id"]) for row in read_rows(target)] == list(range(30))
    assert target.read_text().count("id,text,note") == 1


def _second_model(repository: Path, name: str) -> None:
    """Another model beside car-order: the same bundle under another name."""
    shutil.copytree(repository / "car-order" / "1", repository / name / "1")
    manifest = repository / name / "1" / "bundle.json"
    manifest.write_text(manifest.read_text().replace('"name": "car-order"', f'"name": "{name}"'))


def test_a_resume_with_another_model_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repository = shipped_repository(tmp_path / "repository")
    _second_model(repository, "twin")
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_rows(source, rows(30))
    with RunningServer(make_settings(repository)) as server, Client(server.target) as client:
        stopped_after_eight_rows(client, source, target, model="car-order")
        capsys.readouterr()
        files = ["--input", str(source), "--output", str(target)]
        assert cli(server, *files, "--model", "twin", "--resume") == 2
    assert "--model: 'car-order' then, 'twin' now" in capsys.readouterr().err
    assert [int(row["id"]) for row in read_rows(target)] == list(range(8))


def test_a_resume_after_latest_moved_on_is_refused_naming_both_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repository = shipped_repository(tmp_path / "repository")
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_rows(source, rows(30))
    with RunningServer(make_settings(repository)) as server, Client(server.target) as client:
        stopped_after_eight_rows(client, source, target)
        add_version(repository, "car-order", 2)
        server.run(server.server.reloader.reload())  # type: ignore[union-attr]  # what a poll does
        assert client.model().version == 2  # `latest` has moved on
        capsys.readouterr()
        assert cli(server, "--input", str(source), "--output", str(target), "--resume") == 2
    err = capsys.readouterr().err
    assert "model version" in err and "1 then, 2 now" in err
    assert [int(row["id"]) for row in read_rows(target)] == list(range(8))  # nothing of version 2


def test_parquet_output_keeps_keys_that_only_later_jsonl_rows_have(client: Client, tmp_path: Path) -> None:
    data = rows(10)
    data[7]["extra"] = "only here"
    source, target = tmp_path / "in.jsonl", tmp_path / "out.parquet"
    write_rows(source, data)
    assert classify_file(client, FileJob(source, target)).stopped is None
    out = read_rows(target)
    assert [row["extra"] for row in out] == [None] * 7 + ["only here", None, None]
    assert list(out[0])[-3:] == ["label", "p_negative", "p_positive"]  # the added columns last


def test_jsonl_lines_that_are_not_json_objects_are_rejected_and_the_run_goes_on(
    server: RunningServer, tmp_path: Path
) -> None:
    lines = [json.dumps(row) for row in rows(7)]
    lines[1] = '{"id": 1, "text": '
    lines[4] = '["a list", "not an object"]'
    lines[5] = '{"id": 5, "text": "half a pair \\ud83d"}'  # valid JSON that no UTF-8 file can hold
    source, target = tmp_path / "in.jsonl", tmp_path / "out.csv"
    source.write_text("\n".join(lines[:3]) + "\n\n" + "\n".join(lines[3:]) + "\n")  # a blank line too
    assert cli(server, "--input", str(source), "--output", str(target)) == 0
    assert [int(row["id"]) for row in read_rows(target)] == [0, 2, 3, 6]
    rejects = rejects_of(target)
    assert [(r["row"], r["line"], r["input"]) for r in rejects] == [
        (1, 2, lines[1]),
        (4, 6, lines[4]),
        (5, 7, lines[5]),
    ]
    assert rejects[0]["reason"].startswith("not JSON: ") and rejects[1]["reason"] == "not a JSON object"
    assert "surrogate" in rejects[2]["reason"]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_jsonl_input_with_bad_lines_resumes_into_jsonl_and_parquet(
    client: Client, tmp_path: Path, suffix: str
) -> None:
    """Lines that cannot be read, before and after the stop, are rejected with their line
    numbers in both runs; a key only rows after the stop have is kept in the output."""
    data = rows(30)
    for row in data[20:]:
        row["extra"] = f"x{row['id']}"
    lines = [json.dumps(row).encode() for row in data]
    lines[2] = b'{"id": 2, "text": "unterminated'
    lines[25] = b'{"id": 25, "text": "caf\xe9"}'  # Latin-1, not UTF-8
    source, target = tmp_path / "in.jsonl", tmp_path / f"out{suffix}"
    source.write_bytes(b"\n".join(lines) + b"\n")

    stopped_after_eight_rows(client, source, target)
    report = classify_file(client, FileJob(source, target, batch_size=4, resume=True))
    assert (report.rows_done, report.rejected, report.stopped) == (30, 2, None)

    out = read_rows(target)
    assert [int(row["id"]) for row in out] == [i for i in range(30) if i not in (2, 25)]
    assert out[0].get("extra") is None and [row["extra"] for row in out[-3:]] == ["x27", "x28", "x29"]
    rejects = rejects_of(target)
    assert [(r["row"], r["line"]) for r in rejects] == [(2, 3), (25, 26)]
    assert rejects[0]["reason"].startswith("not JSON") and rejects[0]["input"].startswith('{"id": 2')
    assert "not UTF-8" in rejects[1]["reason"] and "0xe9" in rejects[1]["reason"]
    assert rejects[1]["input"] == '{"id": 25, "text": "caf\\xe9"}'
