"""Calls that end by the client's deadline are counted DEADLINE_EXCEEDED, calls the client
cancels CANCELLED, and every inference call grpc handed over is counted as received (the
difference to attnserve_requests_total is the calls that ended before their handler).

grpc tells a handler only that its call was cancelled; the server reads an expiry from the
call's deadline, whose copy starts when the headers arrive, behind the client's. A call
whose headers left the client more than the call layer's slack after its deadline started
(a loaded machine) is therefore counted CANCELLED: the tests allow a stated share of those
and check exactly what always holds (statuses, and the counts against the client's view).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc

from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from tests.support.load import record_figures
from tests.support.methods import CLASSIFY
from tests.support.servers import RunningServer, make_settings
from tests.support.waits import eventually, until

CALLS = 40
BODY = pb.ClassifyRequest(model="car", texts=["a white car"]).SerializeToString()
CODES = ("OK", "DEADLINE_EXCEEDED", "CANCELLED")
# At most this share of the expiries the server counts may be counted as cancellations.
MISREAD_SHARE = 0.1


def _counted(server: RunningServer) -> dict[str, float]:
    return {
        code: server.value("attnserve_requests_total", protocol="native", transport="grpc", code=code)
        for code in CODES
    }


def _settled(server: RunningServer, received: float, timeout: float = 10.0) -> dict[str, float]:
    """The counts once grpc has handed over `received` calls and every call has ended."""

    def done() -> bool:
        return (
            server.value("attnserve_requests_received_total", protocol="native", transport="grpc") >= received
            and server.value("attnserve_inflight_requests", protocol="native", transport="grpc") == 0
        )

    assert eventually(done, timeout), "calls still in flight 10 s after the client saw them end"
    return _counted(server)


def _minus(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {code: after[code] - before[code] for code in CODES}


Classify = grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]


async def _each(target: str, one: Callable[[Classify], Awaitable[str]]) -> list[str]:
    """`one` run CALLS times at once on a connected channel; the codes the client saw."""
    async with grpc.aio.insecure_channel(target) as channel:
        # Connected first: the calls' headers leave at once, not after the handshake.
        await asyncio.wait_for(channel.channel_ready(), 10)
        classify = channel.unary_unary(CLASSIFY, request_serializer=None, response_deserializer=None)
        return list(await asyncio.gather(*(one(classify) for _ in range(CALLS))))


async def _expire(target: str) -> list[str]:
    async def one(classify: Classify) -> str:
        try:
            await classify(BODY, timeout=1.0)
        except grpc.aio.AioRpcError as exc:
            return str(exc.code().name)
        return "OK"

    return await _each(target, one)


async def _cancel(target: str, in_progress: Callable[[], bool]) -> list[str]:
    """CALLS calls, each cancelled once every one of them is in progress at the server."""
    started = asyncio.Event()

    async def one(classify: Classify) -> str:
        call = classify(BODY, timeout=30)
        await started.wait()
        call.cancel()
        try:
            await call
        except asyncio.CancelledError:
            return "CANCELLED"
        return "OK"

    async def watch() -> None:
        await until(in_progress, what="every call in progress at the server")
        started.set()

    watching = asyncio.ensure_future(watch())
    codes = await _each(target, one)
    await watching
    return codes


def test_deadline_and_cancellation_are_told_apart_and_counted(model_repository: Path) -> None:
    # Batches wait 3 s for more texts: every call is still queued when it ends.
    settings = make_settings(model_repository, max_delay_ms=3000, max_batch_size=4096, max_queue=4096)
    with RunningServer(settings) as server:
        expired = asyncio.run(_expire(server.target))
        after_expiry = _settled(server, CALLS)

        def in_progress() -> bool:
            return server.value("attnserve_inflight_requests", protocol="native", transport="grpc") >= CALLS

        cancelled = asyncio.run(_cancel(server.target, in_progress))
        after_cancel = _settled(server, 2 * CALLS)
        received = server.value("attnserve_requests_received_total", protocol="native", transport="grpc")
    by_cancel = _minus(after_cancel, after_expiry)
    record_figures(
        "deadline 1 s, then cancel once all are in progress (40 calls each, queued)",
        after_expiry=after_expiry,
        by_cancel=by_cancel,
        received=received,
    )
    assert expired == ["DEADLINE_EXCEEDED"] * CALLS and cancelled == ["CANCELLED"] * CALLS
    assert received == 2 * CALLS
    # A call that reached its handler is counted once, by why it ended (one that did not,
    # only as received); none was answered.
    assert after_expiry["OK"] == 0 and 0 < sum(after_expiry.values()) <= CALLS, after_expiry
    assert after_expiry["CANCELLED"] <= MISREAD_SHARE * sum(after_expiry.values()), after_expiry
    # A cancellation 29 s before its deadline is never counted as an expiry.
    assert by_cancel["OK"] == 0 and by_cancel["DEADLINE_EXCEEDED"] == 0, by_cancel
    assert by_cancel["CANCELLED"] == CALLS, by_cancel  # each was in progress when cancelled


async def _short_deadlines(target: str) -> dict[str, int]:
    seen: dict[str, int] = {}
    async with grpc.aio.insecure_channel(target) as channel:
        await asyncio.wait_for(channel.channel_ready(), 10)
        classify = channel.unary_unary(CLASSIFY, request_serializer=None, response_deserializer=None)

        async def one(timeout: float) -> None:
            try:
                await classify(BODY, timeout=timeout)
                code = "OK"
            except grpc.aio.AioRpcError as exc:
                code = exc.code().name
            seen[code] = seen.get(code, 0) + 1

        for _ in range(5):
            await asyncio.gather(*(one(t) for t in [0.005, 0.02, 0.05, 1.0] * 25))
    return seen


def test_short_deadlines_under_load_are_counted_as_far_as_grpc_lets_the_server_see_them(
    model_repository: Path,
) -> None:
    with RunningServer(make_settings(model_repository, max_delay_ms=2)) as server:
        client = asyncio.run(_short_deadlines(server.target))
        received = server.value("attnserve_requests_received_total", protocol="native", transport="grpc")
        counted = _settled(server, received)
    total = sum(client.values())
    ended_early = counted["DEADLINE_EXCEEDED"] + counted["CANCELLED"]
    record_figures(
        "short deadlines (5/20/50/1000 ms, 500 calls, 100 at once)",
        client=client,
        server=counted,
        received=received,
        never_reached_python=total - received,
    )
    assert total == 500 and set(client) <= {"OK", "DEADLINE_EXCEEDED"}, client
    assert sum(counted.values()) <= received <= total
    # Every reply the client got was counted OK; a call may still end OK in the server and
    # reach the client after its deadline. The client cancelled nothing: every call the
    # server ended early was an expiry the client saw.
    assert counted["OK"] >= client.get("OK", 0), (counted, client)
    assert ended_early <= client.get("DEADLINE_EXCEEDED", 0), (counted, client)
    assert counted["CANCELLED"] <= MISREAD_SHARE * ended_early, counted
