"""Stopper: overlapping stops of a real grpc.aio server, as the shutdown makes them."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import textwrap

import grpc

from attnserve.service.api.grpc.transport import Stopper
from tests.support.waits import until

# In a child process: without Stopper, grpcio 1.85 ends it with SIGSEGV within a few rounds.
_OVERLAPPING_ZERO_GRACE_STOPS = textwrap.dedent(
    """
    import asyncio, grpc
    from attnserve.service.api.grpc.transport import Stopper

    async def round():
        server = grpc.aio.server()
        server.add_insecure_port("127.0.0.1:0")
        await server.start()
        stopper = Stopper(server)
        await asyncio.gather(stopper.stop(0), stopper.stop(0))

    for _ in range(100):
        asyncio.run(round())
    print("stopped 100 servers")
    """
)


def test_overlapping_stops_without_grace_leave_the_process_running() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _OVERLAPPING_ZERO_GRACE_STOPS], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"status {done.returncode}:\n{done.stderr[-2000:]}"
    assert "stopped 100 servers" in done.stdout


def _refuses(port: int) -> bool:
    """Whether nothing listens on `port` any more (a stopping server closes it first)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


def test_a_shorter_grace_ends_a_stop_in_progress() -> None:
    async def scenario() -> grpc.StatusCode:
        entered = asyncio.Event()

        async def never_ends(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
            entered.set()
            await asyncio.Event().wait()  # only a stop ends this call
            return request

        server = grpc.aio.server()
        handler = grpc.unary_unary_rpc_method_handler(never_ends)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.Slow", {"Call": handler}),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        stopper = Stopper(server)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            slow = channel.unary_unary("/t.Slow/Call", request_serializer=None, response_deserializer=None)
            call = slow(b"x")
            await asyncio.wait_for(entered.wait(), 10)  # the call is in progress
            patient = asyncio.ensure_future(stopper.stop(30))
            await until(lambda: _refuses(port), what="the patient stop closing the port")
            assert not patient.done(), "a 30 s grace waits for the call in progress"
            await stopper.stop(0)  # shortens the first: the call is cancelled now
            await asyncio.wait_for(patient, 5)  # bounds a broken run; the grace would be 30 s
            try:
                await call
            except grpc.aio.AioRpcError as error:
                return error.code()
        raise AssertionError("the call finished although the server stopped")

    code = asyncio.run(scenario())
    assert code in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE), code
