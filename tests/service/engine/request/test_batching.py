"""Dynamic batching under concurrent load, and deadlines honoured before the model runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from attnserve.service.client import AsyncClient, ClientError
from tests.support.servers import RunningServer, make_settings
from tests.support.waits import eventually

TEXTS = [
    "the white car is on the left and the black car is on the right.",
    "a black car",
    "there is a black car on the left and a white car on the right near the park.",
    "on the left stands the white car.",
]


def test_300_concurrent_requests_from_many_clients_all_succeed_in_shared_batches(
    server: RunningServer,
) -> None:
    batches_before = server.value("attnserve_batch_size_count", model="car")
    singles_before = server.value("attnserve_batch_size_bucket", model="car", le="1.0")

    async def one_client(index: int) -> list[str]:
        async with AsyncClient(server.target, timeout=60) as client:
            replies = await asyncio.gather(
                *(client.classify(TEXTS[(index + i) % len(TEXTS)], model="car") for i in range(30))
            )
        return [reply.results[0].label for reply in replies]

    async def run() -> list[list[str]]:
        return await asyncio.gather(*(one_client(index) for index in range(10)))

    labels = [label for client_labels in asyncio.run(run()) for label in client_labels]
    assert len(labels) == 300 and all(labels)
    batches = server.value("attnserve_batch_size_count", model="car") - batches_before
    singles = server.value("attnserve_batch_size_bucket", model="car", le="1.0") - singles_before
    assert 0 < batches < 300, "300 texts must have been merged into fewer model calls"
    assert singles < batches, "some batch must hold more than one text"
    assert (
        server.value("attnserve_requests_total", protocol="native", transport="grpc", model="car", code="OK")
        >= 300
    )
    assert server.value("attnserve_inflight_requests", protocol="native", transport="grpc") == 0


def test_expired_deadline_is_dropped_before_the_model_runs(model_repository: Path) -> None:
    settings = make_settings(model_repository, max_delay_ms=1500, max_batch_size=64)
    with RunningServer(settings) as server:

        async def scenario() -> None:
            async with AsyncClient(server.target) as client:
                with pytest.raises(ClientError) as error:
                    await client.classify(["a white car", "a black car"], model="car", timeout=0.2)
                assert error.value.code == grpc.StatusCode.DEADLINE_EXCEEDED

        asyncio.run(scenario())
        # The client sees its deadline pass before the server has ended the call.
        assert eventually(
            lambda: server.value("attnserve_inflight_requests", protocol="native", transport="grpc") == 0
        )
        assert server.value("attnserve_deadline_dropped_total", model="car") == 2
        assert server.value("attnserve_queue_depth", model="car") == 0
        assert server.value("attnserve_batch_size_count", model="car") == 0, "the model ran for dropped texts"
        assert server.value("attnserve_requests_total", model="car", code="DEADLINE_EXCEEDED") == 1

        async def later() -> str:  # the server keeps serving afterwards
            async with AsyncClient(server.target) as client:
                return (await client.classify("a white car", model="car", timeout=10)).results[0].label

        assert asyncio.run(later())
        assert server.value("attnserve_batch_size_count", model="car") == 1


def test_batches_respect_the_size_cap(model_repository: Path) -> None:
    with RunningServer(make_settings(model_repository, max_batch_size=4, max_delay_ms=50)) as server:

        async def run() -> None:
            async with AsyncClient(server.target) as client:
                await asyncio.gather(*(client.classify(TEXTS, model="pool") for _ in range(10)))

        asyncio.run(run())
        assert server.value("attnserve_batch_size_sum", model="pool") == 40
        assert server.value("attnserve_batch_size_bucket", model="pool", le="4.0") == server.value(
            "attnserve_batch_size_count", model="pool"
        )
