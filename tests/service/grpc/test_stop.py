"""Stopper: overlapping stops of a real grpc.aio server, as the shutdown makes them."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time

import grpc

from attnserve.service.grpc.transport import Stopper

# In a child process: without Stopper, grpcio 1.85 ends it with SIGSEGV within a few rounds.
_OVERLAPPING_ZERO_GRACE_STOPS = textwrap.dedent(
    """
    import asyncio, grpc
    from attnserve.service.grpc.transport import Stopper

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


async def _slow(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    await asyncio.sleep(30)
    return request


def test_a_shorter_grace_ends_a_stop_in_progress() -> None:
    async def scenario() -> tuple[float, grpc.StatusCode]:
        server = grpc.aio.server()
        handler = grpc.unary_unary_rpc_method_handler(_slow)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.Slow", {"Call": handler}),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        stopper = Stopper(server)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            slow = channel.unary_unary("/t.Slow/Call", request_serializer=None, response_deserializer=None)
            call = slow(b"x")
            await asyncio.sleep(0.3)  # the call is in progress
            started = time.monotonic()
            patient = asyncio.ensure_future(stopper.stop(30))
            await asyncio.sleep(0.1)
            await stopper.stop(0)  # shortens the first: the call is cancelled now
            await asyncio.wait_for(patient, 5)
            try:
                await call
            except grpc.aio.AioRpcError as error:
                return time.monotonic() - started, error.code()
        raise AssertionError("the 30 s call finished although the server stopped")

    seconds, code = asyncio.run(scenario())
    assert seconds < 5, f"the stop waited {seconds:.1f} s"
    assert code in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE), code
