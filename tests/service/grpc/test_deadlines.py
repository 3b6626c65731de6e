"""Calls that end by the client's deadline are counted DEADLINE_EXCEEDED, calls the client
cancels CANCELLED, and every inference call grpc handed over is counted as received (the
difference to attnserve_requests_total is the calls that ended before their handler)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc

from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from tests.support.load import record_figures
from tests.support.methods import CLASSIFY
from tests.support.servers import RunningServer, make_settings

CALLS = 40
BODY = pb.ClassifyRequest(model="car", texts=["a white car"]).SerializeToString()


async def _expire(target: str) -> list[str]:
    async with grpc.aio.insecure_channel(target) as channel:
        classify = channel.unary_unary(CLASSIFY, request_serializer=None, response_deserializer=None)

        async def one() -> str:
            try:
                await classify(BODY, timeout=1.0)
            except grpc.aio.AioRpcError as exc:
                return str(exc.code().name)
            return "OK"

        codes = await asyncio.gather(*(one() for _ in range(CALLS)))
        await asyncio.sleep(0.5)  # the server sees the last resets
        return list(codes)


async def _cancel(target: str) -> list[str]:
    async with grpc.aio.insecure_channel(target) as channel:
        classify = channel.unary_unary(CLASSIFY, request_serializer=None, response_deserializer=None)

        async def one() -> str:
            call = classify(BODY, timeout=30)
            await asyncio.sleep(1.0)
            call.cancel()
            try:
                await call
            except asyncio.CancelledError:
                return "CANCELLED"
            return "OK"

        codes = await asyncio.gather(*(one() for _ in range(CALLS)))
        await asyncio.sleep(0.5)
        return list(codes)


def test_deadline_and_cancellation_are_told_apart_and_counted(model_repository: Path) -> None:
    # Batches wait 3 s for more texts: every call is still queued when it ends.
    settings = make_settings(model_repository, max_delay_ms=3000, max_batch_size=4096, max_queue=4096)
    with RunningServer(settings) as server:

        def counted() -> dict[str, float]:
            return {
                code: server.value("attnserve_requests_total", api="native", code=code)
                for code in ("DEADLINE_EXCEEDED", "CANCELLED", "OK")
            }

        expired = asyncio.run(_expire(server.target))
        after_expiry = counted()
        cancelled = asyncio.run(_cancel(server.target))
        after_cancel = counted()
        received = server.value("attnserve_requests_received_total", api="native")
    record_figures(
        "deadline 1 s, then cancel at 1 s (40 calls each, queued)",
        after_expiry=after_expiry,
        after_cancel=after_cancel,
        received=received,
    )
    assert set(expired) == {"DEADLINE_EXCEEDED"} and set(cancelled) == {"CANCELLED"}
    # A call that reached its handler is counted by why it ended (one that did not, only
    # as received): expiries never as cancellations, cancellations never as expiries.
    assert after_expiry["DEADLINE_EXCEEDED"] > 0 and after_expiry["CANCELLED"] == 0, after_expiry
    assert after_cancel["DEADLINE_EXCEEDED"] == after_expiry["DEADLINE_EXCEEDED"], after_cancel
    assert after_cancel["CANCELLED"] > 0 and after_cancel["OK"] == 0, after_cancel
    assert received == 2 * CALLS


async def _short_deadlines(target: str) -> dict[str, int]:
    seen: dict[str, int] = {}
    async with grpc.aio.insecure_channel(target) as channel:
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
        counted = {
            code: server.value("attnserve_requests_total", api="native", code=code)
            for code in ("OK", "DEADLINE_EXCEEDED", "CANCELLED")
        }
        received = server.value("attnserve_requests_received_total", api="native")
    total = sum(client.values())
    record_figures(
        "short deadlines (5/20/50/1000 ms, 500 calls, 100 at once)",
        client=client,
        server=counted,
        received=received,
        never_reached_python=total - received,
    )
    assert total == 500 and set(client) <= {"OK", "DEADLINE_EXCEEDED"}, client
    assert counted["CANCELLED"] == 0, counted  # a deadline is never counted as a cancellation
    assert sum(counted.values()) <= received <= total
