"""Connections that never speak are closed: plain TCP connects that send nothing, ones
that send only the HTTP/2 preface, and ones that complete the HTTP/2 handshake but never
start a call (`handshake_timeout_s`, `max_connection_idle_s`)."""

from __future__ import annotations

import select
import socket
import time
from pathlib import Path

from attnserve.service.client import Client
from attnserve.service.settings import Settings
from tests.support.load import record_figures
from tests.support.servers import RunningServer, make_settings

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # length 0, type SETTINGS, no flags, stream 0
SETTINGS_ACK = b"\x00\x00\x00\x04\x01\x00\x00\x00\x00"
PER_KIND = 100
TIMEOUT_S = 1.0
WAIT_S = 12.0


def _open(port: int, hello: bytes) -> tuple[socket.socket, float]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if hello:
        sock.sendall(hello)
    sock.setblocking(False)
    return sock, time.monotonic()


KINDS = {
    "silent": b"",
    "preface only": PREFACE,
    "handshake, no call": PREFACE + EMPTY_SETTINGS + SETTINGS_ACK,
}


def _run(settings: Settings, count: int, wait: float) -> dict[str, list[float]]:
    with RunningServer(settings) as server:
        port = server.server.port if server.server else 0
        opened = {kind: [_open(port, hello) for _ in range(count)] for kind, hello in KINDS.items()}
        try:
            closed = {kind: _closed_within(sockets, wait) for kind, sockets in opened.items()}
            with Client(server.target, timeout=5) as client:  # still serving real callers
                assert client.classify(["a white car"], model="car").results[0].label
        finally:
            for sockets in opened.values():
                for sock, _ in sockets:
                    sock.close()
    return closed


def _closed_within(sockets: list[tuple[socket.socket, float]], limit: float) -> list[float]:
    """Seconds from its opening until the server closed each socket (EOF or reset); inf if
    it did not within `limit` seconds from now."""
    began = time.monotonic()
    opened = dict(sockets)
    closed = {sock: float("inf") for sock, _ in sockets}
    while time.monotonic() - began < limit and any(t == float("inf") for t in closed.values()):
        waiting = [sock for sock, t in closed.items() if t == float("inf")]
        readable, _, _ = select.select(waiting, [], [], 0.2)
        for sock in readable:
            try:
                data = sock.recv(65536)  # the server's SETTINGS or GOAWAY, then EOF
            except (ConnectionResetError, BlockingIOError) as exc:
                data = b"" if isinstance(exc, ConnectionResetError) else b"pending"
            if not data:
                closed[sock] = time.monotonic() - opened[sock]
    return list(closed.values())


def test_silent_connections_are_closed(model_repository: Path) -> None:
    settings = make_settings(
        model_repository, handshake_timeout_s=TIMEOUT_S, max_connection_idle_s=TIMEOUT_S, metrics=False
    )
    closed = _run(settings, PER_KIND, WAIT_S)
    figures = {
        kind: {"closed": sum(t < WAIT_S for t in times), "max_s": round(max(times), 2)}
        for kind, times in closed.items()
    }
    record_figures(f"silent connections ({PER_KIND} of each; timeouts {TIMEOUT_S} s)", **figures)
    for kind, times in closed.items():
        assert all(t < WAIT_S for t in times), (kind, figures)


def test_without_the_timeouts_silent_connections_stay_open(model_repository: Path) -> None:
    """The control: what closes them above is the settings, not something else."""
    settings = make_settings(
        model_repository, handshake_timeout_s=120, max_connection_idle_s=0, metrics=False
    )
    closed = _run(settings, 10, 3.0)
    assert all(t == float("inf") for times in closed.values() for t in times), closed
