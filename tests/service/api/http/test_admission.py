"""Admission, tokens and TLS on the HTTP port: the same settings and answers as gRPC."""

from __future__ import annotations

import contextlib
import http.client
import ssl
import time
from pathlib import Path

import psutil
import pytest

from tests.support.certs import Authority
from tests.support.http import call, classify
from tests.support.process import ServerProcess
from tests.support.servers import RunningServer, free_port, make_settings

TOKEN = "inference-token-0123456789"
BODY = {"texts": ["the white car is on the left of the black car"]}


def test_a_starting_server_refuses_with_503_and_is_not_ready(model_repository: Path) -> None:
    settings = make_settings(model_repository, http_port=free_port())
    with RunningServer(settings, load=False) as server:
        port = server.server.http_port  # type: ignore[union-attr]
        refused = classify(port, "car", BODY)
        assert refused.status == 503 and refused.error["code"] == "UNAVAILABLE"
        assert refused.headers["retry-after"] == "1"
        assert call(port, "GET", "/v2/health/live").status == 200
        assert call(port, "GET", "/v2/health/ready").status == 400
        v2 = call(port, "POST", "/v2/models/car/infer", b"{}")
        assert v2.status == 503 and isinstance(v2.json()["error"], str)


def test_draining_refuses_new_http_calls(model_repository: Path) -> None:
    settings = make_settings(model_repository, http_port=free_port())
    with RunningServer(settings) as server:
        port = server.server.http_port  # type: ignore[union-attr]
        assert classify(port, "car", BODY).status == 200
        server.server.core.gate.drain()  # type: ignore[union-attr]  # what shutdown() does first
        refused = classify(port, "car", BODY)
        assert refused.status == 503 and "shutting down" in refused.error["message"]
        assert call(port, "GET", "/v2/health/ready").status == 400


def test_bearer_tokens_guard_every_route_but_health(model_repository: Path, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"inference {TOKEN}\n")
    settings = make_settings(model_repository, http_port=free_port(), auth=True, auth_tokens_file=tokens)
    with RunningServer(settings) as server:
        port = server.server.http_port  # type: ignore[union-attr]
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": TOKEN}):
            refused = classify(port, "car", BODY, headers=headers)
            assert refused.status == 401 and refused.error["code"] == "UNAUTHENTICATED"
            assert refused.headers["www-authenticate"].startswith("Bearer")
        assert call(port, "GET", "/v1/models").status == 401
        assert call(port, "GET", "/v2/models/car").status == 401
        good = {"Authorization": f"Bearer {TOKEN}"}
        assert classify(port, "car", BODY, headers=good).status == 200
        assert call(port, "GET", "/v2/models/car", headers=good).status == 200
        assert call(port, "GET", "/v2/health/ready").status == 200  # probes carry no token
        assert server.value("attnserve_auth_failures_total", code="UNAUTHENTICATED") >= 4


@pytest.mark.parametrize("mutual", [False, True])
def test_tls_and_mutual_tls_use_the_grpc_certificate_settings(
    model_repository: Path, tmp_path: Path, mutual: bool
) -> None:
    ca = Authority(tmp_path / "ca", "ca")
    pair, client_pair = ca.issue("server", server=True), ca.issue("client", server=False)
    extra = {"tls_client_ca": ca.pem} if mutual else {}
    settings = make_settings(
        model_repository, http_port=free_port(), tls_cert=pair.cert, tls_key=pair.key, **extra
    )
    with RunningServer(settings) as server:
        port = server.server.http_port  # type: ignore[union-attr]
        context = ssl.create_default_context(cafile=ca.pem)
        context.check_hostname = False
        if mutual:
            with pytest.raises((ssl.SSLError, ConnectionError)):
                call(port, "GET", "/v1/models", context=context, timeout=5)
            context.load_cert_chain(client_pair.cert, client_pair.key)
        assert classify(port, "car", BODY, context=context).status == 200
        try:
            status: int | None = call(port, "GET", "/v1/models", timeout=5).status  # plaintext on TLS
        except (OSError, http.client.HTTPException):
            status = None
        assert status != 200


def test_every_worker_serves_http_on_the_shared_port(model_repository: Path) -> None:
    port = free_port()
    with ServerProcess(model_repository, "--workers", "2", "--http-port", str(port)) as server:
        deadline = time.monotonic() + 120
        while listening_workers(server.pid, port) < 2:  # the workers start one after the other
            assert time.monotonic() < deadline, "the second worker never listened on the HTTP port"
            time.sleep(0.2)
        ready = 0
        while ready < 16:  # a worker listens before its models load: wait until both answer ready
            assert time.monotonic() < deadline, "the workers did not both become ready"
            ready = ready + 1 if call(port, "GET", "/v2/health/ready").status == 200 else 0
            time.sleep(0.0 if ready else 0.2)
        replies = [classify(port, "car", BODY).status for _ in range(8)]  # a connection each
        assert replies == [200] * 8


def listening_workers(pid: int, port: int) -> int:
    """Worker processes of `pid` holding a listening socket on `port` (SO_REUSEPORT: one each)."""
    count = 0
    for child in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if any(c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in child.net_connections()):
                count += 1
    return count
