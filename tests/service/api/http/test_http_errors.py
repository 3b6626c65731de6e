"""What an HTTP client can get wrong, answered with a JSON error and the right status: never a
traceback, never a crash, and the server keeps serving."""

from __future__ import annotations

import gzip
import socket
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from attnserve.service.api.http.errors import HTTP_STATUS
from attnserve.service.errors import Status
from tests.support.http import Reply, call, classify
from tests.support.servers import RunningServer, free_port, make_settings

LIMIT = 64 * 1024
GOOD = {"texts": ["the white car is on the left of the black car"]}


@pytest.fixture(scope="module")
def server(model_repository: Path) -> Iterator[RunningServer]:
    settings = make_settings(
        model_repository, http_port=free_port(), http_max_body_bytes=LIMIT, http_read_timeout_s=1.0
    )
    with RunningServer(settings) as running:
        yield running


def check(reply: Reply, status: int, code: str, *words: str) -> None:
    assert reply.status == status, reply.body
    assert reply.headers["content-type"] == "application/json"
    error = reply.error
    assert error["code"] == code
    assert all(word in error["message"] for word in words), error["message"]
    assert "Traceback" not in error["message"] and ".py" not in error["message"]


def test_every_status_has_the_http_code_of_its_grpc_meaning() -> None:
    expected = {
        "INVALID_ARGUMENT": 400, "UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403, "NOT_FOUND": 404,
        "RESOURCE_EXHAUSTED": 429, "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504, "INTERNAL": 500,
        "UNIMPLEMENTED": 501, "CANCELLED": 499, "FAILED_PRECONDITION": 400,
    }  # fmt: skip
    assert {status.name: code for status, code in HTTP_STATUS.items()} == expected
    assert set(HTTP_STATUS) == set(Status) - {Status.OK}


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"{not json", ("not valid JSON", "line 1")),
        (b"\xff\xfe\x00", ("not valid JSON",)),
        (b"[" * 100_00 + b"]" * 100_00, ("nested too deeply",)),
        (b"[]", ("request body: expected a JSON object",)),
        (b'"texts"', ("request body: expected a JSON object",)),
        (b'{"texts": "one text"}', ("texts",)),
        (b'{"texts": [1, 2]}', ("texts.0",)),
        (b'{"texts": []}', ("texts",)),
        (b'{"texts": ["a car"], "top_k": "3"}', ("top_k",)),
        (b'{"texts": ["a car"], "top_k": -1}', ("top_k",)),
        (b'{"texts": ["a car"], "attention": "everything"}', ("attention",)),
        (b'{"texts": ["a car"], "version": 1.5}', ("version",)),
        (b'{"texts": ["a car"], "surprise": true}', ("unknown field 'surprise'", "texts, attention")),
    ],
)
def test_malformed_json_and_wrong_types_are_invalid_argument(
    port: int, body: bytes, words: tuple[str, ...]
) -> None:
    check(classify(port, "car", body), 400, "INVALID_ARGUMENT", *words)  # type: ignore[arg-type]


def test_limits_of_the_core_apply(port: int, server: RunningServer) -> None:
    many = {"texts": ["a car"] * (server.settings.max_texts_per_request + 1)}
    check(classify(port, "car", many), 400, "INVALID_ARGUMENT", "limit is 64")
    check(classify(port, "nope", GOOD), 404, "NOT_FOUND", "nope")
    check(classify(port, "car", {**GOOD, "version": 9}), 404, "NOT_FOUND", "version")
    check(classify(port, "bow", {**GOOD, "attention": "pooled"}), 400, "INVALID_ARGUMENT", "no attention")


def test_a_body_over_the_limit_is_413(port: int) -> None:
    huge = b'{"texts": ["' + b"car " * LIMIT + b'"]}'
    check(classify(port, "car", huge), 413, "RESOURCE_EXHAUSTED", str(LIMIT))  # type: ignore[arg-type]
    bomb = gzip.compress(b" " * (LIMIT * 20))  # small on the wire, 20x the limit inflated
    assert len(bomb) < LIMIT
    reply = call(port, "POST", "/v1/models/car:classify", bomb, {"Content-Encoding": "gzip"})
    check(reply, 413, "RESOURCE_EXHAUSTED")
    truncated = zlib.compress(b'{"texts": ["a car"]}')[:-4]
    check(
        call(port, "POST", "/v1/models/car:classify", truncated, {"Content-Encoding": "deflate"}),
        400,
        "INVALID_ARGUMENT",
    )
    check(
        call(port, "POST", "/v1/models/car:classify", b"{}", {"Content-Encoding": "br"}),
        400,
        "INVALID_ARGUMENT",
        "br",
    )


def test_a_slow_client_gets_408_and_the_server_carries_on(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/models/car:classify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"texts"'
        )
        started = time.monotonic()
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
        assert time.monotonic() - started < 5
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b'"code":"DEADLINE_EXCEEDED"' in answer
    assert classify(port, "car", GOOD).status == 200


def test_unknown_routes_and_methods_are_answered(port: int) -> None:
    check(call(port, "GET", "/nothing/here"), 404, "NOT_FOUND", "/nothing/here")
    check(call(port, "GET", "/static/missing.js"), 404, "NOT_FOUND")
    check(call(port, "GET", "/v1/models/car:classify"), 404, "NOT_FOUND", "car:classify")
    check(call(port, "DELETE", "/v1/models"), 405, "UNIMPLEMENTED", "DELETE")
    v2 = call(port, "GET", "/v2/models/car/infer")
    assert v2.status == 405 and isinstance(v2.json()["error"], str)
    check(classify(port, "car", GOOD, headers={"timeout": "soon"}), 400, "INVALID_ARGUMENT", "timeout")
    assert classify(port, "car", GOOD).status == 200
