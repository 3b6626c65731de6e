"""A bad OpenTelemetry variable stops `attnserve-serve` at start-up with one line, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "'http/json'"),
        ("OTEL_TRACES_SAMPLER_ARG", "2", "OTEL_TRACES_SAMPLER_ARG='2'"),
    ],
)
def test_a_bad_otel_variable_is_one_line_and_exit_2(
    tmp_path: Path, variable: str, value: str, named: str
) -> None:
    env = {"PATH": "/usr/bin:/bin", variable: value, "OTEL_TRACES_SAMPLER": "traceidratio"}
    done = subprocess.run(
        [sys.executable, "-m", "attnserve.service.cli", "--repository", str(tmp_path), "--tracing"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("attnserve-serve: invalid tracing settings:")
