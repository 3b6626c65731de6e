"""A port the server cannot listen on: the start-up error names the address, the port's role
and the flag that picks another."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from attnserve.service.cli import serve_main
from attnserve.service.errors import StartupError
from tests.support.servers import RunningServer, make_settings


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


@pytest.mark.parametrize(
    ("setting", "role", "flag"),
    [("port", "the gRPC port", "--port"), ("metrics_port", "the metrics port", "--metrics-port")],
)
def test_a_port_in_use_is_named_with_its_flag(
    tmp_path: Path, taken_port: int, setting: str, role: str, flag: str
) -> None:
    settings = make_settings(tmp_path, **{setting: taken_port})
    with pytest.raises(StartupError) as caught, RunningServer(settings, load=False):
        pass
    message = str(caught.value)
    assert f"127.0.0.1:{taken_port} ({role}): the port is already in use" in message
    assert f"choose another with {flag}" in message


def test_the_command_logs_one_line_and_exits_1(
    tmp_path: Path, taken_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code = serve_main(["--repository", str(tmp_path), "--port", str(taken_port), "--metrics-port", "0"])
    assert code == 1
    err = capsys.readouterr().err
    assert f"ERROR attnserve: cannot start: cannot listen on 127.0.0.1:{taken_port} (the gRPC port)" in err
    assert "Traceback" not in err
