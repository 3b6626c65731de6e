"""The serial phase's `--serial-files` (tests/support/scheduling.py) collects every serial test:
`make test` treats "nothing selected" as a pass, so a serial test left out would go unnoticed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.scheduling import SERIAL

ROOT = Path(__file__).resolve().parents[1]


def collected(tmp_path: Path, *flags: str) -> set[str]:
    """The node ids `pytest --collect-only -m serial FLAGS` prints, run as the Makefile runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}  # not a worker itself
    env["ATTNSERVE_TEST_SHARED"] = str(tmp_path)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only"]
    command += ["-m", "serial"]
    done = subprocess.run([*command, *flags], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line.strip() for line in done.stdout.splitlines() if "::" in line}


def test_every_serial_entry_is_collected_from_the_serial_files_alone(tmp_path: Path) -> None:
    found = collected(tmp_path, "--serial-files")
    assert {node.split("::", 1)[0] for node in found} == {entry.split("::", 1)[0] for entry in SERIAL}
    for entry in (e for e in SERIAL if "::" in e):  # one test of a file: that test, and only it
        file = entry.split("::", 1)[0]
        assert {node.split("[", 1)[0] for node in found if node.startswith(file + "::")} == {entry}


@pytest.mark.slow  # collects the whole suite once more
def test_the_serial_files_hold_every_test_marked_serial(tmp_path: Path) -> None:
    assert collected(tmp_path, "--serial-files") == collected(tmp_path)
