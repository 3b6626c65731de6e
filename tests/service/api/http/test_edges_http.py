"""The HTTP port's edges against hostile clients: header size and time, many slow
connections, redirects that never trust `Host`, compressed bodies with trailing bytes."""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from attnserve.service.api.http.transport import HttpLimits, HttpTransport
from tests.support.http import call
from tests.support.servers import RunningServer, free_port, make_settings

READ_TIMEOUT_S = 1.0
SLOW_CLIENTS = 200


@pytest.fixture(scope="module")
def server(model_repository: Path) -> Iterator[RunningServer]:
    settings = make_settings(model_repository, http_port=free_port(), http_read_timeout_s=READ_TIMEOUT_S)
    with RunningServer(settings) as running:
        yield running


@pytest.fixture(scope="module")
def port(server: RunningServer) -> int:
    assert server.server is not None
    return server.server.http_port


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    return sock


def _until_closed(sock: socket.socket, seconds: float) -> bytes:
    """What the server sent before closing; fails if it is still open after `seconds`."""
    sock.settimeout(seconds)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for {seconds} s")
    return received


def _send_all(sock: socket.socket, data: bytes) -> None:
    # the server may refuse the head before the client has finished sending it
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(data)


def test_a_head_over_64_kib_is_refused(port: int) -> None:
    for head in (
        b"GET /v2/health/live HTTP/1.1\r\nhost: a\r\nx-big: " + b"a" * (1 << 20) + b"\r\n\r\n",
        b"GET /v2/health/live HTTP/1.1\r\nhost: a\r\n"
        + b"".join(b"x-%d: %s\r\n" % (i, b"c" * 1000) for i in range(70))
        + b"\r\n",
        b"GET /v2/health/live?" + b"q" * 70_000 + b" HTTP/1.1\r\nhost: a\r\n\r\n",
    ):
        with _connect(port) as sock:
            _send_all(sock, head)
            reply = _until_closed(sock, 10)
        assert reply == b"" or reply.startswith(b"HTTP/1.1 431 "), reply[:80]
    # under the limit: served
    headers = {f"x-{i}": "d" * 1000 for i in range(60)}
    assert call(port, "GET", "/v2/health/live", headers=headers).status == 200


def test_a_client_trickling_its_headers_is_cut_off(port: int) -> None:
    with _connect(port) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\n")
        started = time.monotonic()
        closed = False
        for i in range(40):  # a line every 0.2 s, for at most 8 s
            time.sleep(0.2)
            try:
                sock.sendall(b"x-slow-%d: 1\r\n" % i)
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            sock.settimeout(0.001)
            try:
                if sock.recv(65536).startswith(b"HTTP/1.1 408 "):
                    closed = True
                    break
            except TimeoutError:
                continue
        elapsed = time.monotonic() - started
    assert closed, "still connected after 8 s of trickled headers"
    assert elapsed < 8 * READ_TIMEOUT_S  # cut off by the read timeout, not by the test's end


def test_slow_clients_neither_stay_nor_delay_a_normal_call(port: int) -> None:
    silent = [_connect(port) for _ in range(SLOW_CLIENTS // 2)]
    partial = [_connect(port) for _ in range(SLOW_CLIENTS // 2)]
    try:
        for sock in partial:
            sock.sendall(b"POST /v1/models/car:classify HTTP/1.1\r\nhost: a\r\n")
        document = {"texts": ["the white car is left"]}
        reply = call(port, "POST", "/v1/models/car:classify", document, timeout=10)
        assert reply.status == 200, reply.body[:200]
        for sock in silent:
            assert _until_closed(sock, 10 * READ_TIMEOUT_S) == b""
        for sock in partial:
            assert _until_closed(sock, 10 * READ_TIMEOUT_S).startswith(b"HTTP/1.1 408 ")
    finally:
        for sock in silent + partial:
            sock.close()


def test_a_body_refused_on_its_length_is_not_read_and_the_connection_closes(port: int) -> None:
    head = b"POST /v1/models/car:classify HTTP/1.1\r\nhost: a\r\ncontent-length: 100000000\r\n\r\n"
    with _connect(port) as sock:
        _send_all(sock, head + b"x" * 300_000)  # more body than a head may hold, after the refusal
        reply = _until_closed(sock, 10 * READ_TIMEOUT_S)
    assert reply.startswith(b"HTTP/1.1 413 "), reply[:80]
    assert b"HTTP/1.1 4" not in reply[12:], reply  # one reply, then closed


def test_redirects_are_relative_whatever_the_host_header(port: int) -> None:
    reply = call(port, "GET", "/v2/models/car/", headers={"Host": "evil.example:666"})
    assert reply.status in (307, 308), reply.status
    assert reply.headers["location"] == "/v2/models/car"


def test_gzip_body_with_trailing_bytes_is_refused(port: int) -> None:
    body = json.dumps({"texts": ["the white car is left"]}).encode()
    headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    path = "/v1/models/car:classify"
    assert call(port, "POST", path, gzip.compress(body), headers=headers).status == 200
    for tail in (b"x", b"\0" * 100, gzip.compress(body)):
        reply = call(port, "POST", path, gzip.compress(body) + tail, headers=headers)
        assert reply.status == 400, (reply.status, reply.body[:200])
        assert "after the end of the gzip data" in reply.error["message"]


async def _hello(scope: Scope, receive: Receive, send: Send) -> None:
    await PlainTextResponse("hello")(scope, receive, send)


def test_at_the_connection_cap_the_longest_idle_connection_makes_room(model_repository: Path) -> None:
    settings = make_settings(model_repository, http_port=0)
    transport = HttpTransport(_hello, settings, HttpLimits(header_timeout_s=30, max_connections=20))
    running = RunningServer(settings, load=False)
    with running:
        port = running.run(transport.start())
        try:
            idle = [_connect(port) for _ in range(20)]
            deadline = time.monotonic() + 10
            while running.run(_count(transport)) < 20 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert call(port, "GET", "/", timeout=10).body == b"hello"
            assert _until_closed(idle[0], 10) == b""  # the oldest silent connection made room
            for sock in idle[1:]:
                sock.settimeout(0.05)
                with pytest.raises(TimeoutError):
                    sock.recv(1)  # the others are still open
            for sock in idle:
                sock.close()
        finally:
            running.run(transport.stop(1.0))


async def _count(transport: HttpTransport) -> int:
    return transport.connections
