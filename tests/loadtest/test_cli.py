"""`python -m loadtest` options: durations are bounded, the locust command line is complete."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from loadtest.cli import build_parser, locust_command, metrics_default, seconds


@pytest.mark.parametrize(("text", "value"), [("30", 30.0), ("30s", 30.0), ("2m", 120.0), ("1h30m", 5400.0),
                                             ("1.5s", 1.5)])  # fmt: skip
def test_durations(text: str, value: float) -> None:
    assert seconds(text) == value


@pytest.mark.parametrize("text", ["", "0s", "abc", "25h", "-1s"])
def test_a_duration_must_be_bounded_and_readable(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        seconds(text)


def test_metrics_default_to_the_targets_host_on_the_metrics_port() -> None:
    assert metrics_default("127.0.0.1:50051") == "127.0.0.1:9100"
    assert metrics_default("dns:///server:50051") == "server:9100"


def test_the_locust_command_carries_the_run_and_passes_other_options_through(tmp_path: Path) -> None:
    argv = ["--target", "127.0.0.1:50051", "--duration", "10s", "--api", "v2", "--out", str(tmp_path)]
    args, extra = build_parser().parse_known_args([*argv, "--bad-share", "0.3"])
    command = locust_command(args, extra)
    assert command[-1] == "V2User" and "NativeUser" not in command
    joined = " ".join(command)
    for part in ("--headless", "--run-time 10s", "--host 127.0.0.1:50051", "--metrics 127.0.0.1:9100",
                 "--bad-share 0.3", f"--html {tmp_path / 'attnserve.html'}"):  # fmt: skip
        assert part in joined
