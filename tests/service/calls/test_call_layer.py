"""The call layer alone, on a real core with an empty repository: how a route is applied (its
permit, its size limit), how a call ends (its status, its permit given back, its metrics) and
how refusals are made (new errors, detached from their tracebacks)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from attnserve.service.calls.auth import Authenticator, Tokens
from attnserve.service.calls.call import CallLayer
from attnserve.service.calls.record import Call
from attnserve.service.calls.route import Route
from attnserve.service.engine.admission import Permit, State
from attnserve.service.engine.context import CallContext
from attnserve.service.engine.core import Core
from attnserve.service.engine.metrics import Metrics
from attnserve.service.engine.request.classify import Inputs
from attnserve.service.errors import INTERNAL_MESSAGE, Internal, InvalidArgument, ServiceError, Status
from tests.support.servers import make_settings

TOKEN = b"inference-token-0123456789"
INFERENCE = Route(counted=True, limit=1024, setting="max_message_bytes")
METADATA = Route(counted=False)
HEALTH = Route(counted=False, gated=False, token=False)


def core(tmp_path: Path, **overrides: object) -> Core:
    settings = make_settings(tmp_path, **overrides)
    metrics = Metrics(CollectorRegistry())
    built = Core(settings, metrics)
    built.gate.state = State.SERVING
    return built


def requests(built: Core, code: str) -> float:
    value = built.metrics.registry.get_sample_value(
        "attnserve_requests_total",
        {"protocol": "native", "transport": "http", "model": "_unknown", "code": code},
    )
    return value or 0.0


def test_an_error_is_answered_detached_and_the_permit_given_back(tmp_path: Path) -> None:
    built = core(tmp_path, max_inflight_bytes=4096, max_message_bytes=1024)
    layer = CallLayer(built, "native", "http")

    async def refuse(call: Call) -> bytes:
        assert built.gate.inflight_bytes == 80 and built.gate.active == 1  # the route applied first
        raise InvalidArgument("texts: too many")

    async def run() -> object:
        return await layer.serve(INFERENCE, refuse, size=80)

    error = asyncio.run(run())
    assert isinstance(error, ServiceError) and error.code is Status.INVALID_ARGUMENT
    assert error.__traceback__ is None and error.__context__ is None
    assert built.gate.inflight_bytes == 0 and built.gate.active == 0
    assert requests(built, "INVALID_ARGUMENT") == 1


def test_an_unexpected_failure_is_internal_with_a_fixed_message(tmp_path: Path) -> None:
    built = core(tmp_path)
    layer = CallLayer(built, "native", "http")

    async def fail(call: Call) -> bytes:
        raise KeyError("/secret/path")

    error = asyncio.run(layer.serve(INFERENCE, fail))
    assert isinstance(error, ServiceError) and error.code is Status.INTERNAL
    assert error.message == INTERNAL_MESSAGE
    assert requests(built, "INTERNAL") == 1


def test_a_cancelled_call_is_counted_then_cancelled(tmp_path: Path) -> None:
    built = core(tmp_path)
    layer = CallLayer(built, "native", "http")

    async def run() -> None:
        async def wait(call: Call) -> bytes:
            await asyncio.sleep(10)
            return b""

        task = asyncio.ensure_future(layer.serve(INFERENCE, wait))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert requests(built, "CANCELLED") == 1


def test_permits_are_refused_while_draining_but_not_a_streams_message(tmp_path: Path) -> None:
    built = core(tmp_path)
    layer = CallLayer(built, "native", "http")
    stream = built.gate.try_acquire_permit()
    built.gate.drain()
    seen: list[tuple[int, int]] = []

    async def work(call: Call) -> bytes:
        seen.append((built.gate.active, built.gate.inflight_bytes))
        return b"ok"

    async def run() -> list[object]:
        refused = [await layer.serve(METADATA, work, size=10) for _ in range(2)]
        return [*refused, await layer.serve(INFERENCE, work, size=100, within=stream)]

    first, second, message = asyncio.run(run())
    assert isinstance(first, ServiceError) and isinstance(second, ServiceError)
    assert first is not second, "a refusal is a new error each time"
    assert first.code is Status.UNAVAILABLE and "shutting down" in first.message
    assert message == b"ok" and seen == [(1, 100)]  # within its stream: bytes only, held while it ran
    assert built.gate.active == 1 and built.gate.inflight_bytes == 0
    stream.release()
    stream.release()
    assert built.gate.active == 0


def test_a_call_takes_one_permit_released_when_it_ends(tmp_path: Path) -> None:
    built = core(tmp_path)
    layer = CallLayer(built, "native", "http")
    permits: list[Permit] = []

    async def work(call: Call) -> bytes:
        assert call.context.permit is not None and call.context.permit.live
        permits.append(call.context.permit)
        assert built.gate.active == 1
        return b""

    assert asyncio.run(layer.serve(METADATA, work)) == b""
    assert built.gate.active == 0 and not permits[0].live


def test_the_engine_runs_no_call_without_a_live_permit(tmp_path: Path) -> None:
    built = core(tmp_path)
    released = built.gate.try_acquire_permit()
    released.release()
    for context in (CallContext(None), CallContext(released)):
        with pytest.raises(Internal):
            asyncio.run(built.classify("any", Inputs(texts=["a text"]), context))


def test_a_refusal_before_the_body_wins_over_the_bodys_size(tmp_path: Path) -> None:
    """The route's checks in order: the permit, the token, the size limit, the bytes held."""
    built = core(tmp_path)
    built.gate.max_inflight_bytes = 100
    auth = Authenticator(Tokens(((TOKEN, "inference"),)), built.metrics, "header 'Authorization")
    layer = CallLayer(built, "native", "grpc", auth)

    async def work(call: Call) -> bytes:
        return b"ok"

    async def run(size: int, token: bytes = TOKEN) -> object:
        return await layer.serve(INFERENCE, work, size=size, token=token)

    def code(result: object) -> Status | None:
        return result.code if isinstance(result, ServiceError) else None

    assert code(asyncio.run(run(2000, b"wrong"))) is Status.UNAUTHENTICATED
    assert code(asyncio.run(run(2000))) is Status.RESOURCE_EXHAUSTED  # over the route's 1024
    held = built.gate.try_acquire_permit(60)  # another call's body in progress
    assert code(asyncio.run(run(60, b"wrong"))) is Status.UNAUTHENTICATED
    assert code(asyncio.run(run(60))) is Status.RESOURCE_EXHAUSTED  # over max_inflight_bytes
    held.release()
    assert asyncio.run(run(60)) == b"ok"
    built.gate.drain()
    assert code(asyncio.run(run(2000, b"wrong"))) is Status.UNAVAILABLE
    assert built.gate.active == 0 and built.gate.inflight_bytes == 0


def test_http_calls_end_at_their_timeout_and_grpc_calls_at_grpcs(tmp_path: Path) -> None:
    built = core(tmp_path)

    async def slow(call: Call) -> bytes:
        await asyncio.sleep(0.3)
        return b"late"

    http = asyncio.run(CallLayer(built, "native", "http").serve(INFERENCE, slow, timeout=0.05))
    assert isinstance(http, ServiceError) and http.code is Status.DEADLINE_EXCEEDED
    assert http.message == "timeout: the call did not finish within 0.05 s"
    # grpc enforces the client's deadline itself: the call layer only records it.
    assert asyncio.run(CallLayer(built, "native", "grpc").serve(INFERENCE, slow, timeout=0.05)) == b"late"


def test_a_starting_server_refuses_gated_routes_and_answers_health(tmp_path: Path) -> None:
    built = core(tmp_path)
    built.gate.state = State.STARTING
    layer = CallLayer(built, "native", "http")

    async def answer(call: Call) -> bytes:
        return b"ok"

    async def run(route: Route) -> object:
        return await layer.serve(route, answer)

    refused = asyncio.run(run(METADATA))
    assert isinstance(refused, ServiceError) and refused.code is Status.UNAVAILABLE
    assert "not loaded its models yet" in refused.message
    assert asyncio.run(run(HEALTH)) == b"ok" and built.gate.active == 0


def test_a_body_over_the_routes_limit_is_refused_before_the_work_runs(tmp_path: Path) -> None:
    built = core(tmp_path)
    layer = CallLayer(built, "native", "http")
    ran: list[Call] = []

    async def work(call: Call) -> bytes:
        ran.append(call)
        return b""

    error = asyncio.run(layer.serve(INFERENCE, work, size=1025))
    assert isinstance(error, ServiceError) and error.code is Status.RESOURCE_EXHAUSTED
    assert error.message == "request body: 1025 bytes; the limit for this method is 1024 (max_message_bytes)"
    assert not ran and built.gate.active == 0 and built.gate.inflight_bytes == 0


def test_token_refusals_are_new_errors_and_counted(tmp_path: Path) -> None:
    built = core(tmp_path)
    tokens = Tokens(((TOKEN, "inference"),))
    auth = Authenticator(tokens, built.metrics, "header 'Authorization")
    assert auth.refusal(TOKEN) is None
    first, second = auth.refusal(b"wrong"), auth.refusal(b"")
    assert first is not None and second is not None and first is not second
    assert first.code is Status.UNAUTHENTICATED
    assert first.message.endswith("send header 'Authorization: Bearer <token>'")
    denied = auth.refusal(TOKEN, admin=True)
    assert denied is not None and denied.code is Status.PERMISSION_DENIED
    sample = built.metrics.registry.get_sample_value
    assert sample("attnserve_auth_failures_total", {"code": "UNAUTHENTICATED"}) == 2
    assert sample("attnserve_auth_failures_total", {"code": "PERMISSION_DENIED"}) == 1
