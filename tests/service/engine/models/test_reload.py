"""Repository changes picked up while serving (`repository_poll_seconds`), under load.

A new version is loaded, checked and swapped in with no failed call and the old session
freed; damaged versions never replace the good one; a removed model finishes the calls it
accepted, then answers NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import shutil
import time
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from attnserve.service.client import AsyncClient, Client, ClientError
from tests.support.bundles import DAMAGES, add_version, finish_copy
from tests.support.load import Ledger, record_figures
from tests.support.servers import RunningServer, make_settings

POLL = 0.2
TEXTS = ["the white car is on the left of the black car", "a black car", "on the left stands the white car"]


async def _until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


class Traffic:
    """Callers classifying with `car` back to back; records (start, version) of each reply."""

    def __init__(self, target: str, workers: int = 6) -> None:
        self.target, self.workers = target, workers
        self.ledger = Ledger()
        self.versions: list[tuple[float, int]] = []
        self.stop = asyncio.Event()

    async def run(self) -> None:
        async with AsyncClient(self.target, timeout=30) as client:

            async def one(i: int) -> None:
                started = time.monotonic()
                reply = await client.classify(TEXTS[i % 3 :], model="car")
                self.versions.append((started, reply.version))

            async def loop(worker: int) -> None:
                i = worker
                while not self.stop.is_set():

                    def make(i: int = i) -> Awaitable[None]:
                        return one(i)

                    await self.ledger.call(make)
                    i += 1

            await asyncio.gather(*(loop(w) for w in range(self.workers)))

    def seen(self) -> list[int]:
        return [version for _, version in sorted(self.versions)]


def test_a_new_version_is_swapped_in_under_load_with_no_failed_call(repository: Path) -> None:
    with RunningServer(make_settings(repository, repository_poll_seconds=POLL)) as server:
        assert server.server is not None
        models = server.server.core.repository
        old = weakref.ref(models.models["car"].versions[1].runtime.session)
        traffic = Traffic(server.target)

        async def scenario() -> float:
            running = asyncio.ensure_future(traffic.run())
            await _until(lambda: len(traffic.versions) >= 20)  # version 1 answers
            add_version(repository, "car", 2)
            copied = time.monotonic()
            await _until(lambda: any(v == 2 for _, v in traffic.versions))
            swapped = time.monotonic() - copied
            await _until(lambda: sum(v == 2 for _, v in traffic.versions) >= 20)  # and then version 2
            traffic.stop.set()
            await running
            return swapped

        swapped = asyncio.run(scenario())
        seen = traffic.seen()
        first_new = seen.index(2)
        assert traffic.ledger.ended == {"OK": traffic.ledger.started}, traffic.ledger.details
        assert set(seen[first_new:]) == {2}, "a call started after the swap was answered by the old version"
        gc.collect()
        assert old() is None, "the old version's onnxruntime session was not freed"
        assert server.samples("attnserve_model_info", model="car", version="1") == []
        assert server.samples("attnserve_model_info", model="car", version="2") == [1.0]
        assert server.value("attnserve_model_load_failures_total") == 0
        with Client(server.target) as client:
            assert client.model("car").versions == [2] and client.health("car") == "SERVING"
    record_figures(
        "hot swap car v1 -> v2 under load (6 callers, poll 0.2 s)",
        **traffic.ledger.summary(),
        answered_by_v1=first_new,
        answered_by_v2=len(seen) - first_new,
        swapped_after_s=round(swapped, 2),
        old_session_freed=True,
    )


def test_damaged_versions_never_replace_the_good_one(
    repository: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with RunningServer(make_settings(repository, repository_poll_seconds=POLL)) as server:
        traffic = Traffic(server.target)
        damaged = {version: damage for version, damage in enumerate(DAMAGES, start=2)}
        half_copied = max(damaged)
        assert damaged[half_copied] == "half-copied folder"

        async def scenario() -> None:
            running = asyncio.ensure_future(traffic.run())
            for version, damage in damaged.items():
                add_version(repository, "car", version, damage=damage)
            await _until(
                lambda: server.value("attnserve_model_load_failures_total", model="car") == len(DAMAGES)
            )
            # A later poll must pass the damaged folders by, as they did not change. A new
            # version of `pool` (reconciled after `car` in every poll) shows that poll ran.
            add_version(repository, "pool", 2)
            await _until(lambda: server.samples("attnserve_model_info", model="pool", version="2") == [1.0])
            refusals = server.value("attnserve_model_load_failures_total", model="car")
            finish_copy(repository, "car", half_copied)  # the copy completes: now it loads
            await _until(lambda: any(v == half_copied for _, v in traffic.versions))
            traffic.stop.set()
            await running
            assert refusals == len(DAMAGES)

        asyncio.run(scenario())
        seen = traffic.seen()
        assert traffic.ledger.ended == {"OK": traffic.ledger.started}, traffic.ledger.details
        assert set(seen[: seen.index(half_copied)]) == {1}, "a damaged version answered a call"
        assert server.value("attnserve_model_load_failures_total", model="car") == len(DAMAGES)
    refused = {
        r.getMessage().split(" refused: ")[0]: r.getMessage()
        for r in caplog.records
        if " refused: " in r.getMessage()
    }
    reasons = {damage: refused[f"model car version {version}"] for version, damage in damaged.items()}
    assert "onnxruntime cannot load model.onnx" in reasons["truncated onnx"]
    assert "onnxruntime cannot load model.onnx" in reasons["zero-byte onnx"]
    assert "input" in reasons["wrong inputs and outputs"]
    assert (
        "golden case 0" in reasons["golden mismatch"] and "logits differ by 0.5" in reasons["golden mismatch"]
    )
    assert "sha256" in reasons["sha256 mismatch"]
    assert "only partly copied" in reasons["half-copied folder"] or "missing" in reasons["half-copied folder"]
    record_figures(
        "six damaged versions, then the half-copied one completed (poll 0.2 s)",
        **traffic.ledger.summary(),
        answered_by_v1=seen.index(half_copied),
        load_failures_counted=len(DAMAGES),
        answered_by_completed_copy=len(seen) - seen.index(half_copied),
    )


def test_a_removed_model_finishes_its_calls_then_answers_not_found(repository: Path) -> None:
    settings = make_settings(repository, repository_poll_seconds=POLL, max_delay_ms=1500, max_batch_size=64)
    with RunningServer(settings) as server:
        ledger, later = Ledger(), Ledger()

        async def scenario() -> None:
            async with AsyncClient(server.target, timeout=30) as client:
                in_flight = [
                    asyncio.ensure_future(ledger.call(lambda: client.classify("a white car", model="pool")))
                    for _ in range(10)
                ]
                await _until(lambda: server.value("attnserve_queue_depth", model="pool") == 10)
                shutil.rmtree(repository / "pool")
                await _until(lambda: "pool" not in server.server.core.repository.models)  # type: ignore[union-attr]
                for _ in range(5):
                    await later.call(lambda: client.classify("a white car", model="pool"))
                await asyncio.gather(*in_flight)
                assert await client.health("pool") == "NOT_SERVING"

        asyncio.run(scenario())
        assert ledger.ended == {"OK": 10}, ledger.details
        assert later.ended == {"NOT_FOUND": 5}
        assert all("no model named 'pool'" in d for d in later.details["NOT_FOUND"])
        with Client(server.target) as client:
            assert [m.name for m in client.models()] == ["car"]
            with pytest.raises(ClientError):
                client.model("pool")
        assert server.samples("attnserve_model_info", model="pool") == []
    record_figures(
        "model folder removed with 10 calls queued",
        in_flight=ledger.summary(),
        afterwards=later.summary(),
    )
