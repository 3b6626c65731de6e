"""Draining finishes what it started, against `attnserve-serve` as its own process.

32 callers and 4 open ClassifyStream streams when SIGTERM arrives: every call sent before
the signal completes OK, the streams answer what they read and end UNAVAILABLE (never
INTERNAL). With callers that retry at once on UNAVAILABLE, the server still stops as soon
as its work is done, far inside the grace period.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

from attnserve.service.client import AsyncClient, ClientError, build_request
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from tests.support.load import record_figures
from tests.support.process import ServerProcess

GRACE = 10.0
# Calls sent before the signal may still be queued inside grpc; on this shared 2-core
# machine the event loop needs more than the default 0.5 s to take them all.
ACCEPT = 1.0
TEXTS = ["a white car", "the black car is left"]


class Calls:
    """Per-call outcomes, split by whether the call started before the signal."""

    def __init__(self) -> None:
        self.signalled: float | None = None
        self.before: Counter[str] = Counter()
        self.after: Counter[str] = Counter()

    async def one(self, client: AsyncClient) -> str:
        began = time.monotonic()
        try:
            await client.classify(TEXTS, model="car")
            code = "OK"
        except ClientError as exc:
            code = exc.code.name
        before = self.signalled is None or began < self.signalled
        (self.before if before else self.after)[code] += 1
        return code


async def _stream(client: AsyncClient, stop: asyncio.Event, sent: list[int]) -> tuple[list[str], str]:
    """One ClassifyStream sending a request every 20 ms until `stop`; (reply codes, end status)."""

    async def requests() -> AsyncIterator[pb.ClassifyRequest]:
        while not stop.is_set():
            sent[0] += 1
            yield build_request("the white car is left", model="car")
            await asyncio.sleep(0.02)

    replies: list[str] = []
    try:
        async for reply in client.stream(requests()):
            replies.append("OK" if reply.error is None else reply.error.code.name)
    except ClientError as exc:
        return replies, exc.code.name
    return replies, "OK"


def test_sigterm_completes_every_call_sent_before_it_and_ends_streams_unavailable(
    model_repository: Path,
) -> None:
    args = ("--grace-seconds", str(GRACE), "--max-delay-ms", "2", "--drain-accept-s", str(ACCEPT))
    calls = Calls()
    with ServerProcess(model_repository, *args) as server:

        async def caller(client: AsyncClient) -> None:
            while await calls.one(client) == "OK":
                pass

        async def scenario() -> tuple[list[tuple[list[str], str]], list[list[int]]]:
            async with AsyncClient(server.target, timeout=GRACE + 5) as client:
                stop = asyncio.Event()
                sent = [[0] for _ in range(4)]
                streams = [asyncio.ensure_future(_stream(client, stop, counter)) for counter in sent]
                callers = [asyncio.ensure_future(caller(client)) for _ in range(32)]
                await asyncio.sleep(1.5)
                calls.signalled = time.monotonic()
                server.terminate()
                await asyncio.gather(*callers)
                ended = await asyncio.wait_for(asyncio.gather(*streams), GRACE + 5)
                stop.set()
                return ended, sent

        ended, sent = asyncio.run(scenario())
        code = server.wait(timeout=GRACE + 5)
    assert code == 0
    assert calls.before["OK"] > 0 and set(calls.before) == {"OK"}, calls.before  # all completed
    assert set(calls.after) <= {"OK", "UNAVAILABLE"}, calls.after
    for replies, status in ended:
        assert status == "UNAVAILABLE", (status, replies)
        assert replies and set(replies) <= {"OK", "UNAVAILABLE"}, replies
    record_figures(
        "SIGTERM with 32 callers and 4 streams (grace 10 s)",
        before_signal=dict(calls.before),
        after_signal=dict(calls.after),
        stream_ends=[status for _, status in ended],
        stream_replies=[Counter(replies) for replies, _ in ended],
        stream_requests_sent=[counter[0] for counter in sent],
    )


def test_drain_with_retrying_callers_ends_when_the_work_does(model_repository: Path) -> None:
    args = ("--grace-seconds", str(GRACE), "--max-delay-ms", "2")
    calls = Calls()
    with ServerProcess(model_repository, *args) as server:

        async def caller(client: AsyncClient, until: float) -> None:
            while time.monotonic() < until:
                if await calls.one(client) != "OK":
                    await asyncio.sleep(0.01)  # a client retrying at once, as many do

        async def scenario() -> None:
            async with AsyncClient(server.target, timeout=GRACE + 5) as client:
                until = time.monotonic() + 1.5 + GRACE
                callers = [asyncio.ensure_future(caller(client, until)) for _ in range(8)]
                await asyncio.sleep(1.5)
                calls.signalled = time.monotonic()
                server.terminate()
                await asyncio.to_thread(server.wait, GRACE + 5)
                exited.append(time.monotonic() - calls.signalled)
                for task in callers:
                    task.cancel()
                await asyncio.gather(*callers, return_exceptions=True)

        exited: list[float] = []
        asyncio.run(scenario())
        code = server.wait(timeout=1)
        output = server.output
    assert code == 0 and "grace period over" not in output
    assert set(calls.before) == {"OK"}, calls.before
    assert set(calls.after) <= {"OK", "UNAVAILABLE", "CANCELLED"}, calls.after
    assert exited[0] < GRACE / 2, exited  # not the whole grace period
    record_figures(
        "SIGTERM with 8 callers retrying at once (grace 10 s)",
        before_signal=dict(calls.before),
        after_signal=dict(calls.after),
        exited_after_s=round(exited[0], 2),
    )
