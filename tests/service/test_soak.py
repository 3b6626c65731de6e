"""A short memory soak for CI: thousands of calls and three hot swaps against
`attnserve-serve` as its own process; its resident memory must level off. (The long soak
is the benchmark's: `python -m bench`.)"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable
from pathlib import Path

import psutil

from attnserve.service.client import AsyncClient
from attnserve.service.client.admin import AdminClient
from attnserve.service.proto.inference import grpc_service_pb2 as v2pb
from tests.support.bundles import add_version
from tests.support.load import Ledger, record_figures
from tests.support.process import ServerProcess
from tests.support.v2 import text_request

ROUNDS, CALLS_PER_ROUND, CONCURRENCY = 4, 600, 16
# Generous: allocator and arena noise moves RSS by a few MB; a leak of one session per
# swap, or of a few hundred bytes per call, would exceed it.
GROWTH_LIMIT_MB = 40.0
TEXTS = ["the white car is on the left of the black car", "a black car parked by the river", "the car"]


async def _round(target: str, ledger: Ledger) -> None:
    async with AsyncClient(target, timeout=30) as client:
        infer = client.channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=v2pb.ModelInferRequest.SerializeToString,
            response_deserializer=v2pb.ModelInferResponse.FromString,
        )
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(CALLS_PER_ROUND):
            queue.put_nowait(i)

        async def one(i: int) -> object:
            if i % 3 == 0:
                return await infer(text_request("pool", TEXTS, outputs=["LABEL", "ATTENTION"]), timeout=30)
            mode = "pooled" if i % 3 == 1 else "all"
            return await client.classify(TEXTS[: 1 + i % 3], model="car", attention=mode, top_k=2)

        async def worker() -> None:
            while not queue.empty():
                i = queue.get_nowait()

                def make(i: int = i) -> Awaitable[object]:
                    return one(i)

                await ledger.call(make)

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


def test_memory_levels_off_over_thousands_of_calls_and_hot_swaps(
    model_repository: Path, tmp_path: Path
) -> None:
    repository = tmp_path / "models"
    for name in ("car", "pool"):
        shutil.copytree(model_repository / name / "1", repository / name / "1")
    ledger = Ledger()
    with ServerProcess(repository, "--admin") as server, AdminClient(server.target) as admin:
        process = psutil.Process(server.pid)
        asyncio.run(_round(server.target, ledger))  # warm-up: arenas and caches reach their size
        rss = [process.memory_info().rss / 2**20]
        for version in range(2, 2 + ROUNDS):
            if version < 2 + ROUNDS - 1:  # three swaps: each must free the version it replaces
                add_version(repository, "car", version)
                assert admin.reload("car")["car"]["serving"] == [version]
            asyncio.run(_round(server.target, ledger))
            rss.append(process.memory_info().rss / 2**20)
    assert ledger.ended == {"OK": ledger.started}, ledger.details
    assert ledger.started == (ROUNDS + 1) * CALLS_PER_ROUND
    growth = max(rss[1:]) - rss[0]
    assert growth < GROWTH_LIMIT_MB, f"RSS grew by {growth:.1f} MB over {ROUNDS} rounds: {rss}"
    record_figures(
        "memory soak: 3000 calls (native + V2, attention), 3 hot swaps",
        **ledger.summary(),
        rss_mb_after_each_round=[round(x, 1) for x in rss],
        growth_mb=round(growth, 1),
        limit_mb=GROWTH_LIMIT_MB,
    )
