"""kit/launch.py, which starts every driven server: ports, readiness, failures that say why."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from kit.launch import health_serving, launched, v2_ready
from kit.ports import free_port


def test_a_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_a_server_that_exits_is_reported_with_its_output(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import sys; print('cannot load the model'); sys.exit(3)"]
    target, log = f"127.0.0.1:{free_port()}", tmp_path / "log"
    with (
        pytest.raises(RuntimeError, match=r"(?s)exited with status 3 .*cannot load the model"),
        launched(command, target, health_serving, "the server", log=log),
    ):
        pass


def test_a_server_that_never_answers_times_out_and_is_stopped(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import time; print('still loading', flush=True); time.sleep(60)"]
    target, log = f"127.0.0.1:{free_port()}", tmp_path / "log"
    with (
        pytest.raises(RuntimeError, match=r"(?s)was not ready after 1s.*still loading"),
        launched(command, target, v2_ready, "the server", timeout=1.0, log=log),
    ):
        pass


def test_probes_read_nothing_listening_as_not_ready() -> None:
    target = f"127.0.0.1:{free_port()}"
    assert not health_serving(target, timeout=0.5)
    assert not v2_ready(target, timeout=0.5)
    assert not v2_ready(target, "car", timeout=0.5)
