"""The ledger's account of calls against a real gRPC server on 127.0.0.1: a call that ended
with no status (cancelled by its caller, or stopped by the caller's own exception) was not
answered, so it counts as lost and never as definitely answered."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest

from kit.ledger import Ledger

METHOD = "/test.Echo/Call"
API = "echo"


def _handler(release: asyncio.Event, arrived: asyncio.Event) -> grpc.GenericRpcHandler[bytes, bytes]:
    async def call(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        arrived.set()
        if request == b"hold":
            await release.wait()
        return request

    method = grpc.unary_unary_rpc_method_handler(call)  # bytes in, bytes out: no serializers
    return grpc.method_handlers_generic_handler("test.Echo", {"Call": method})


class Echo:
    def __init__(self) -> None:
        self.release, self.arrived = asyncio.Event(), asyncio.Event()
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers((_handler(self.release, self.arrived),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")


@contextlib.asynccontextmanager
async def _echo() -> AsyncIterator[tuple[Echo, grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]]]:
    echo = Echo()
    await echo.server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{echo.port}") as channel:
            yield echo, channel.unary_unary(METHOD, None, None)
    finally:
        echo.release.set()
        await echo.server.stop(None)


def test_a_call_with_no_status_is_lost_and_not_answered() -> None:
    ledger = Ledger()

    async def scenario() -> None:
        async with _echo() as (echo, call):
            assert await ledger.call(lambda: call(b"ok", timeout=10), API) == "OK"

            held = asyncio.ensure_future(ledger.call(lambda: call(b"hold", timeout=10), API))
            await asyncio.wait_for(echo.arrived.wait(), 10)  # the server has it; no reply yet
            held.cancel()  # the caller gives up, as a load run stopping does
            with pytest.raises(asyncio.CancelledError):
                await held

            async def unsendable() -> None:  # raises in the client before any status
                await call("a str where the channel takes bytes", timeout=10)  # type: ignore[arg-type]

            with pytest.raises(TypeError):
                await ledger.call(unsendable, API)

    asyncio.run(scenario())
    assert ledger.started == 3 and ledger.ended == {"OK": 1, "NO_STATUS": 2}
    assert ledger.lost == 2
    # What the server is expected to have answered, and what was lost, add up to what was sent.
    assert ledger.answered_definitely() == {API: 1}
    assert sum(ledger.answered_definitely().values()) + ledger.lost == ledger.started
