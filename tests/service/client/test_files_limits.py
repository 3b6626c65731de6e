"""File jobs against a server with a small message limit: a batch too large for one message
is split until it fits and a row too large alone is rejected, not retried; a CSV row with
bytes that are not UTF-8 is rejected and the run goes on; every rename is made durable."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attnserve.service.client import Client, FileJob, classify_file
from attnserve.service.client.files import Retry
from tests.service.client.conftest import rejects_of
from tests.service.client.test_files import POSITIVE, cli, read_rows, rows, write_rows
from tests.support.servers import RunningServer, make_settings
from tests.support.shipped import shipped_repository

MAX_MESSAGE_BYTES = 4096  # a batch of 8 long texts is over it, 4 of them are not


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repository = shipped_repository(tmp_path_factory.mktemp("shipped"))
    with RunningServer(make_settings(repository, max_message_bytes=MAX_MESSAGE_BYTES)) as running:
        yield running


def test_a_batch_over_the_message_limit_is_split_and_a_row_too_large_alone_is_rejected(
    client: Client, tmp_path: Path
) -> None:
    data = rows(24)
    for row in data:
        row["text"] = " ".join([POSITIVE] * 20)  # about 900 bytes
    data[13]["text"] = "car " * 2000  # 8000 bytes: over the limit even alone
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_rows(source, data)
    job = FileJob(source, target, batch_size=8, workers=2, retry=Retry(tries=3, first_wait=0.01))
    report = classify_file(client, job)
    assert (report.rows_done, report.rejected, report.stopped) == (24, 1, None)
    assert report.retries == 0  # a refusal for size is not the server being busy
    out = read_rows(target)
    assert [int(row["id"]) for row in out] == [i for i in range(24) if i != 13]
    assert {row["label"] for row in out} == {"positive"}
    (reject,) = rejects_of(target)
    assert reject["row"] == 13 and reject["line"] == 14 and reject["input"]["id"] == 13
    assert reject["reason"].startswith("too large for one call even alone: RESOURCE_EXHAUSTED")


def test_a_csv_row_with_bytes_that_are_not_utf8_is_rejected_and_the_run_goes_on(
    server: RunningServer, tmp_path: Path
) -> None:
    source, target = tmp_path / "in.csv", tmp_path / "out.csv"
    write_rows(source, rows(6))
    text = source.read_bytes()
    source.write_bytes(text.replace(b"c 3", b"caf\xe9 3"))  # row 3's note, a cell over two lines
    assert cli(server, "--input", str(source), "--output", str(target)) == 0
    assert [int(row["id"]) for row in read_rows(target)] == [0, 1, 2, 4, 5]
    (reject,) = rejects_of(target)
    assert reject["row"] == 3 and reject["line"] == 8  # the header, then two lines a row
    assert reject["reason"] == "bytes that are not UTF-8 in column 'note'"
    assert reject["input"]["note"] == 'a, "b"\ncaf\\xe9 3'


def test_every_rename_is_followed_by_a_sync_of_its_directory(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The progress file and the Parquet parts and output are renamed into place; each
    rename is durable only once its directory is fsynced, before anything else is renamed."""
    events: list[tuple[str, tuple[int, int]]] = []
    real_replace, real_rename, real_fsync = os.replace, os.rename, os.fsync

    def directory_of(path: Any) -> tuple[int, int]:
        found = os.stat(Path(path).parent)
        return found.st_dev, found.st_ino

    def replace(source: Any, target: Any, **options: Any) -> None:
        real_replace(source, target, **options)
        events.append(("rename", directory_of(target)))

    def rename(source: Any, target: Any, **options: Any) -> None:
        real_rename(source, target, **options)
        events.append(("rename", directory_of(target)))

    def fsync(fd: Any) -> None:
        real_fsync(fd)
        found = os.fstat(fd)
        if stat.S_ISDIR(found.st_mode):
            events.append(("sync", (found.st_dev, found.st_ino)))

    source, target = tmp_path / "in.csv", tmp_path / "out.parquet"
    write_rows(source, rows(20))
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "fsync", fsync)
    classify_file(client, FileJob(source, target, batch_size=4, workers=1, stop_after=8))
    assert classify_file(client, FileJob(source, target, resume=True)).stopped is None
    monkeypatch.undo()

    renames = [i for i, (kind, _) in enumerate(events) if kind == "rename"]
    assert len(renames) >= 6  # progress files, parts, the output twice
    for at in renames:
        following = events[at + 1 :]
        until_next = following[: next((i for i, e in enumerate(following) if e[0] == "rename"), None)]
        assert ("sync", events[at][1]) in until_next, f"rename {at} of {len(events)} events not synced"
    assert len(read_rows(target)) == 20
