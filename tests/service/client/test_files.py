"""Files in, files out: `attnserve-client classify --input/--output` and `classify_file`
against a real server serving the shipped car-order bundle: the three formats, every row
exactly once after SIGTERM or SIGKILL and --resume, rejects with reasons, a 0-row file,
a missing column, Parquet without pyarrow."""

from __future__ import annotations

import csv
import io
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from attnserve.service.client import Client, FileError, FileJob, classify_file
from attnserve.service.client.cli import main as client_main
from attnserve.service.client.files import Retry
from attnserve.service.client.files.progress import JobProgress
from tests.support.servers import RunningServer, free_port, make_settings
from tests.support.shipped import shipped_repository
from tests.support.waits import wait_until

POSITIVE = "the white car is on the left of the black car"
NEGATIVE = "the black car is on the left of the white car"
MAX_TEXT_CHARS = 200  # the server refuses longer texts: a rejection only the server knows about


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repository = shipped_repository(tmp_path_factory.mktemp("shipped"))
    settings = make_settings(repository, max_text_chars=MAX_TEXT_CHARS, long_text="reject")
    with RunningServer(settings) as running:
        yield running


def rows(n: int) -> list[dict[str, Any]]:
    """Row i: id i, a text whose label is known, a column with commas, quotes and a newline."""
    return [{"id": i, "text": POSITIVE if i % 2 else NEGATIVE, "note": f'a, "b"\nc {i}'} for i in range(n)]


def write_rows(path: Path, data: list[dict[str, Any]]) -> None:
    if path.suffix == ".csv":
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=["id", "text", "note"])
            writer.writeheader()
            writer.writerows(data)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in data))
    else:
        schema = pa.schema([("id", pa.int64()), ("text", pa.string()), ("note", pa.string())])
        pq.write_table(pa.Table.from_pylist(data, schema=schema), path, row_group_size=50)


def read_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".csv":
        with path.open(newline="") as handle:
            return list(csv.DictReader(handle))
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines()]
    return list(pq.read_table(path).to_pylist())


def cli(server: RunningServer, *args: str) -> int:
    return client_main(["--target", server.target, "classify", *args])


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_every_row_keeps_its_columns_and_gains_label_and_probabilities(
    server: RunningServer, tmp_path: Path, suffix: str
) -> None:
    source, target = tmp_path / f"in{suffix}", tmp_path / f"out{suffix}"
    write_rows(source, rows(120))
    assert cli(server, "--input", str(source), "--output", str(target), "--batch-size", "16") == 0
    out = read_rows(target)
    assert [int(row["id"]) for row in out] == list(range(120))  # input order, each once
    for row, original in zip(out, rows(120), strict=True):
        assert row["note"] == original["note"] and row["text"] == original["text"]
        assert row["label"] == ("positive" if original["text"] == POSITIVE else "negative")
        assert abs(float(row["p_negative"]) + float(row["p_positive"]) - 1) < 1e-4
    assert not (tmp_path / f"out{suffix}.progress.json").exists()
    assert not (tmp_path / f"out{suffix}.rejects.jsonl").exists()  # nothing rejected, no file


def test_rejected_rows_go_to_the_rejects_file_with_their_reasons(client: Client, tmp_path: Path) -> None:
    data = rows(40)
    data[3]["text"] = ""  # refused here: no text
    data[17]["text"] = "car " * MAX_TEXT_CHARS  # refused by the server: over max_text_chars
    source, target = tmp_path / "in.jsonl", tmp_path / "out.csv"
    write_rows(source, data)
    report = client.classify_file(source, target, batch_size=8, workers=2, with_attention=True)
    assert (report.rows_done, report.rejected, report.stopped) == (40, 2, None)
    out = read_rows(target)
    assert [int(row["id"]) for row in out] == [i for i in range(40) if i not in (3, 17)]
    tokens = json.loads(out[0]["tokens"])
    assert tokens == NEGATIVE.split() and len(json.loads(out[0]["attention"])) == len(tokens)
    rejects = [json.loads(line) for line in (tmp_path / "out.csv.rejects.jsonl").read_text().splitlines()]
    assert [r["row"] for r in rejects] == [3, 17]
    assert "empty" in rejects[0]["reason"]
    assert rejects[1]["reason"].startswith("INVALID_ARGUMENT") and str(MAX_TEXT_CHARS) in rejects[1]["reason"]
    assert rejects[1]["input"]["id"] == 17


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_run_stopped_midway_resumes_and_writes_every_row_exactly_once(
    server: RunningServer, tmp_path: Path, stop: signal.Signals
) -> None:
    data = rows(3000)
    data[5]["text"] = ""
    source, target = tmp_path / "in.csv", tmp_path / "out.csv"
    write_rows(source, data)
    progress = tmp_path / "out.csv.progress.json"
    command = [str(Path(sys.executable).parent / "attnserve-client"), "--target", server.target, "classify"]
    files = ["--input", str(source), "--output", str(target), "--batch-size", "2", "--workers", "2"]
    run = subprocess.Popen([*command, *files], stderr=subprocess.PIPE, text=True)

    def midway() -> bool:
        assert run.poll() is None, run.communicate()[1]
        return progress.exists() and json.loads(progress.read_text())["rows_done"] >= 20

    wait_until(midway, 60, what="20 rows done")
    run.send_signal(stop)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == (143 if stop == signal.SIGTERM else -signal.SIGKILL), stderr
    if stop == signal.SIGTERM:
        assert "--resume" in stderr and "stopped (SIGTERM)" in stderr
    first = json.loads(progress.read_text())["rows_done"]
    assert 20 <= first < 3000
    assert cli(server, *files, "--resume", "--batch-size", "200") == 0  # the batch size may change
    written = [int(row["id"]) for row in read_rows(target)]
    rejected = [
        json.loads(line)["row"] for line in (tmp_path / "out.csv.rejects.jsonl").read_text().splitlines()
    ]
    assert rejected == [5]
    assert sorted(written + rejected) == list(range(3000)) and written == sorted(written)
    assert not progress.exists()


def test_a_zero_row_file_gives_a_header_only_output(server: RunningServer, tmp_path: Path) -> None:
    source, target = tmp_path / "in.csv", tmp_path / "out.csv"
    write_rows(source, [])
    assert cli(server, "--input", str(source), "--output", str(target)) == 0
    assert target.read_text().splitlines() == ["id,text,note,label,p_negative,p_positive"]
    empty = tmp_path / "in.jsonl"
    empty.write_text("")
    assert cli(server, "--input", str(empty), "--output", str(tmp_path / "out.jsonl")) == 0
    assert (tmp_path / "out.jsonl").read_text() == ""


def test_a_missing_text_column_is_named_with_the_columns_present(
    server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.csv"
    write_rows(source, rows(3))
    code = cli(server, "--input", str(source), "--output", str(tmp_path / "out.csv"), "--text-column", "body")
    err = capsys.readouterr().err
    assert code == 2
    assert "no column 'body'" in err and "id, text, note" in err
    assert not (tmp_path / "out.csv").exists()


def test_an_existing_output_is_not_overwritten_unasked(client: Client, tmp_path: Path) -> None:
    source, target = tmp_path / "in.csv", tmp_path / "out.csv"
    write_rows(source, rows(3))
    target.write_text("keep me")
    with pytest.raises(FileError, match="--resume to carry on or --overwrite"):
        client.classify_file(source, target)
    assert target.read_text() == "keep me"
    assert client.classify_file(source, target, overwrite=True).rows_done == 3


def test_parquet_without_pyarrow_names_the_package(server: RunningServer, tmp_path: Path) -> None:
    source = tmp_path / "in.parquet"
    write_rows(source, rows(3))
    script = (
        "import sys; sys.modules['pyarrow'] = None\n"  # the serving install: no pyarrow
        "from attnserve.service.client.cli import main\n"
        f"sys.exit(main(['--target', {server.target!r}, 'classify', '--input', {str(source)!r}, "
        f"'--output', {str(tmp_path / 'out.csv')!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "Parquet files need pyarrow" in done.stderr and "pip install pyarrow" in done.stderr


def test_a_server_that_is_not_up_yet_is_retried_with_backoff(tmp_path: Path) -> None:
    """Nothing listens on the port when the job starts (its first call gets UNAVAILABLE);
    the job retries until the server is up and then classifies every row."""
    source, target = tmp_path / "in.csv", tmp_path / "out.csv"
    write_rows(source, rows(10))
    settings = make_settings(shipped_repository(tmp_path / "repository"), port=free_port())
    target_address = f"127.0.0.1:{settings.port}"
    job = FileJob(source, target, retry=Retry(tries=200, first_wait=0.05, longest_wait=0.2))
    with Client(target_address) as client, ThreadPoolExecutor(1) as pool:
        running = pool.submit(classify_file, client, job)
        with RunningServer(settings):
            report = running.result(timeout=120)
    assert (report.rows_done, report.rejected, report.stopped) == (10, 0, None)
    assert report.retries >= 1
    assert [int(row["id"]) for row in read_rows(target)] == list(range(10))


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_run_stopped_before_its_first_batch_resumes_cleanly(
    client: Client, tmp_path: Path, suffix: str
) -> None:
    source, target = tmp_path / "in.jsonl", tmp_path / f"out{suffix}"
    write_rows(source, rows(5))
    stop = threading.Event()
    stop.set()
    report = classify_file(client, FileJob(source, target), stop=stop)
    assert (report.rows_done, report.stopped) == (0, "stopped")
    assert client.classify_file(source, target, resume=True).stopped is None
    assert [int(row["id"]) for row in read_rows(target)] == list(range(5))
    if suffix == ".csv":
        assert target.read_text().count("id,text,note") == 1  # one header, kept from the first run


def test_progress_off_a_terminal_is_a_line_with_rate_rows_left_and_rejects() -> None:
    out = io.StringIO()  # not a terminal: lines, no bar
    with JobProgress(10, 2, every=0.0, stream=out) as progress:
        progress.advance(4, 1)
    (line,) = out.getvalue().splitlines()
    assert line.startswith("6/10 rows, ") and " rows/s, 4 left, 1 rejected" in line
