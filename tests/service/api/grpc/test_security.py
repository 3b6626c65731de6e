"""Access control over real channels: TLS, mutual TLS, certificate rotation, bearer tokens
with inference and admin roles, and the client's options for all of them."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from attnserve.service.client import Client, ClientError, build_request
from attnserve.service.client.admin import AdminClient
from attnserve.service.client.channels import Security
from attnserve.service.client.cli import main as client_main
from attnserve.service.errors import StartupError
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from attnserve.service.run import run_server
from attnserve.service.server import Server
from tests.support.certs import SERVER_NAME, Authority
from tests.support.load import record_figures
from tests.support.servers import RunningServer, make_settings, plain_settings
from tests.support.v2 import text_request

INFERENCE_TOKEN = "inference-token-0123456789"
ADMIN_TOKEN = "admin-token-0123456789abcdef"
UNAUTHENTICATED, DENIED = grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Authority]:
    root = tmp_path_factory.mktemp("pki")
    return {"ca": Authority(root / "ca", "ca"), "other": Authority(root / "other", "other-ca")}


def _code(call: object) -> grpc.StatusCode:
    try:
        call()  # type: ignore[operator]
    except ClientError as exc:
        return exc.code
    return grpc.StatusCode.OK


def test_tls_serves_trusting_clients_and_refuses_plaintext_and_other_cas(
    model_repository: Path, pki: dict[str, Authority]
) -> None:
    server_pair = pki["ca"].issue("server", server=True)
    settings = make_settings(model_repository, tls_cert=server_pair.cert, tls_key=server_pair.key)
    with RunningServer(settings) as server:
        trusted = Security(tls_ca=pki["ca"].pem)
        with Client(server.target, security=trusted) as client:
            assert client.classify("a white car", model="car").results[0].label
        by_name = Security(tls_ca=pki["ca"].pem, tls_server_name=SERVER_NAME)
        with Client(f"localhost:{server.server.port}", security=by_name) as client:  # type: ignore[union-attr]
            assert client.health() == "SERVING"
        outcomes = {}
        for name, security in (("plaintext", Security()), ("other CA", Security(tls_ca=pki["other"].pem))):
            with Client(server.target, security=security, timeout=5) as client:
                outcomes[name] = _code(lambda client=client: client.health())
        assert outcomes == {"plaintext": grpc.StatusCode.UNAVAILABLE, "other CA": grpc.StatusCode.UNAVAILABLE}
        assert server.value("attnserve_requests_total", model="car") == 1


def test_mutual_tls_needs_a_client_certificate_from_the_configured_ca(
    model_repository: Path, pki: dict[str, Authority]
) -> None:
    server_pair = pki["ca"].issue("mtls-server", server=True)
    good, foreign = pki["ca"].issue("client", server=False), pki["other"].issue("intruder", server=False)
    settings = make_settings(
        model_repository, tls_cert=server_pair.cert, tls_key=server_pair.key, tls_client_ca=pki["ca"].pem
    )
    with RunningServer(settings) as server:
        cases = {
            "client certificate from the CA": Security(pki["ca"].pem, good.cert, good.key),
            "no client certificate": Security(pki["ca"].pem),
            "client certificate from another CA": Security(pki["ca"].pem, foreign.cert, foreign.key),
            "plaintext": Security(),
        }
        outcomes = {}
        for name, security in cases.items():
            with Client(server.target, security=security, timeout=5) as client:
                outcomes[name] = _code(lambda client=client: client.classify("a white car", model="car"))
        assert outcomes == {
            "client certificate from the CA": grpc.StatusCode.OK,
            "no client certificate": grpc.StatusCode.UNAVAILABLE,
            "client certificate from another CA": grpc.StatusCode.UNAVAILABLE,
            "plaintext": grpc.StatusCode.UNAVAILABLE,
        }
        assert server.value("attnserve_requests_total", model="car") == 1
    record_figures("mutual TLS handshakes", **{name: code.name for name, code in outcomes.items()})


def test_a_rotated_certificate_is_used_for_new_connections(
    model_repository: Path, pki: dict[str, Authority], tmp_path: Path
) -> None:
    first = pki["ca"].issue("rotating", server=True)
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copyfile(first.cert, cert)
    shutil.copyfile(first.key, key)
    with RunningServer(make_settings(model_repository, tls_cert=cert, tls_key=key)) as server:
        with Client(server.target, security=Security(tls_ca=pki["other"].pem), timeout=5) as client:
            assert _code(client.health) == grpc.StatusCode.UNAVAILABLE
        second = pki["other"].issue("rotated", server=True)
        key.write_bytes(second.key.read_bytes())
        cert.write_bytes(second.cert.read_bytes())
        with Client(server.target, security=Security(tls_ca=pki["other"].pem), timeout=5) as client:
            assert client.health() == "SERVING"
        cert.write_text("not a certificate")  # a broken replacement keeps the last good one
        with Client(server.target, security=Security(tls_ca=pki["other"].pem), timeout=5) as client:
            assert client.health() == "SERVING"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"auth": True}, "no token is configured"),
        ({"tls_cert": "missing.pem", "tls_key": "missing.key"}, "are not a PEM certificate chain"),
        ({"tls_cert": "CA", "tls_key": "OTHER_KEY"}, "are not a PEM certificate chain"),
    ],
)
def test_unusable_security_settings_stop_the_server_at_start(
    model_repository: Path,
    pki: dict[str, Authority],
    caplog: pytest.LogCaptureFixture,
    overrides: dict[str, object],
    message: str,
) -> None:
    files = {"CA": pki["ca"].pem, "OTHER_KEY": pki["other"].issue("mismatch", server=True).key}
    values = {k: files.get(v, v) if isinstance(v, str) else v for k, v in overrides.items()}
    settings = make_settings(model_repository, **values)
    with pytest.raises(StartupError, match=message):
        asyncio.run(Server(settings).start())
    caplog.set_level(logging.ERROR)
    assert run_server(settings) == 1
    assert any("cannot start" in r.getMessage() and message in r.getMessage() for r in caplog.records)


@pytest.fixture(scope="module")
def tokens_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("auth") / "tokens"
    path.write_text(f"# role token\ninference {INFERENCE_TOKEN}\nadmin {ADMIN_TOKEN}  # operators\n")
    return path


@pytest.fixture(scope="module")
def guarded(model_repository: Path, tokens_file: Path) -> Iterator[RunningServer]:
    settings = make_settings(model_repository, auth=True, auth_tokens_file=tokens_file, admin=True)
    with RunningServer(settings) as running:
        yield running


def _raw(target: str, method: str, body: bytes, token: str | None) -> grpc.StatusCode:
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    with grpc.insecure_channel(target) as channel:
        try:
            channel.unary_unary(method, request_serializer=None, response_deserializer=None)(
                body, timeout=10, metadata=metadata
            )
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def test_tokens_guard_every_api_but_health(guarded: RunningServer) -> None:
    target = guarded.target
    classify = pb.ClassifyRequest(model="car", texts=["a white car"]).SerializeToString()
    infer = text_request("car", ["a white car"]).SerializeToString()
    codes = {
        (method.split("/")[-1], token and token[:5]): _raw(target, method, body, token)
        for method, body in (
            ("/attnserve.v1.Classifier/Classify", classify),
            ("/attnserve.v1.Classifier/ListModels", b""),
            ("/inference.GRPCInferenceService/ModelInfer", infer),
            ("/inference.GRPCInferenceService/ServerLive", b""),
            ("/attnserve.v1.Admin/Reload", b""),
            ("/attnserve.v1.Nothing/Here", b""),
        )
        for token in (None, "wrong-token-0123456789", INFERENCE_TOKEN, ADMIN_TOKEN)
    }
    ok, unimplemented = grpc.StatusCode.OK, grpc.StatusCode.UNIMPLEMENTED
    for method in ("Classify", "ListModels", "ModelInfer", "ServerLive"):
        assert [codes[(method, t)] for t in (None, "wrong", "infer", "admin")] == [UNAUTHENTICATED] * 2 + [
            ok
        ] * 2
    assert [codes[("Reload", t)] for t in (None, "wrong", "infer", "admin")] == [UNAUTHENTICATED] * 2 + [
        DENIED,
        ok,
    ]
    assert [codes[("Here", t)] for t in (None, "infer")] == [unimplemented, unimplemented]
    with grpc.insecure_channel(target) as channel:  # probes carry no token
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        stream = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
        )
        with pytest.raises(grpc.RpcError) as refused:
            list(stream)
        assert refused.value.code() == UNAUTHENTICATED
        assert "Bearer" in (refused.value.details() or "")
    assert guarded.value("attnserve_auth_failures_total", code="UNAUTHENTICATED") >= 11
    assert guarded.value("attnserve_auth_failures_total", code="PERMISSION_DENIED") >= 1
    record_figures(
        "bearer tokens: calls without / wrong / inference / admin token",
        **{f"{m} {t}": c.name for (m, t), c in codes.items() if m != "Here"},
    )


def test_streams_need_a_token_too(guarded: RunningServer) -> None:
    requests = [build_request("a white car", model="car")]

    async def stream(token: str | None) -> grpc.StatusCode:
        from attnserve.service.client import AsyncClient

        async with AsyncClient(guarded.target, security=Security(token=token)) as client:
            try:
                replies = [reply async for reply in client.stream(requests)]
            except ClientError as exc:
                return exc.code
        assert len(replies) == 1
        return grpc.StatusCode.OK

    # Refusing a stream races with the client's messages in flight; grpc can turn that
    # into INTERNAL unless the server reads them first: repeat to catch it.
    assert {asyncio.run(stream(None)) for _ in range(30)} == {UNAUTHENTICATED}
    assert asyncio.run(stream(INFERENCE_TOKEN)) == grpc.StatusCode.OK


def test_tokens_from_the_environment(model_repository: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNSERVE_INFERENCE_TOKENS", f" {INFERENCE_TOKEN} ,another-token-0123456789")
    with RunningServer(make_settings(model_repository, auth=True)) as server:
        for token, expected in (
            (INFERENCE_TOKEN, "OK"),
            ("another-token-0123456789", "OK"),
            (None, "UNAUTHENTICATED"),
        ):
            with Client(server.target, security=Security(token=token)) as client:
                assert _code(lambda client=client: client.models()).name == expected


def test_the_client_cli_speaks_mutual_tls_with_a_token(
    model_repository: Path,
    pki: dict[str, Authority],
    tokens_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server_pair = pki["ca"].issue("cli-server", server=True)
    client_pair = pki["ca"].issue("cli-client", server=False)
    settings = plain_settings(
        repository=model_repository,
        port=0,
        metrics_port=0,
        tls_cert=server_pair.cert,
        tls_key=server_pair.key,
        tls_client_ca=pki["ca"].pem,
        auth=True,
        auth_tokens_file=tokens_file,
        admin=True,
    )
    with RunningServer(settings) as server:
        flags = [
            "--target",
            server.target,
            "--tls-ca",
            str(pki["ca"].pem),
            "--tls-cert",
            str(client_pair.cert),
            "--tls-key",
            str(client_pair.key),
        ]
        assert (
            client_main([*flags, "--token", INFERENCE_TOKEN, "classify", "a white car", "--model", "pool"])
            == 0
        )
        assert "probability" in capsys.readouterr().out
        assert client_main([*flags, "--token", INFERENCE_TOKEN, "reload", "pool"]) == 1
        assert "PERMISSION_DENIED" in capsys.readouterr().err
        assert client_main([*flags, "--token", ADMIN_TOKEN, "reload", "pool"]) == 0
        assert '"serving": [\n      1\n    ]' in capsys.readouterr().out
        assert client_main([*flags, "classify", "a white car", "--model", "pool"]) == 1
        assert "UNAUTHENTICATED" in capsys.readouterr().err
        assert client_main(["models", *flags, "--token", INFERENCE_TOKEN]) == 0  # options after the command
        assert "pool" in capsys.readouterr().out
        security = Security(pki["ca"].pem, client_pair.cert, client_pair.key, token=ADMIN_TOKEN)
        with AdminClient(server.target, security=security) as admin:
            assert admin.reload()["car"]["serving"] == [1]
