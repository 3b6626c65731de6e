"""SIGTERM under steady load, against `attnserve-serve` as a separate process.

A client-side ledger records every call: it must end with OK (accepted before the signal,
or while the server still admitted calls) or UNAVAILABLE (refused while draining, or
unable to connect once the port has closed), and no call may end without a status.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

from attnserve.service.client import AsyncClient, ClientError, build_request
from tests.support.load import Ledger, record_figures
from tests.support.process import ServerProcess
from tests.support.servers import RunningServer, make_settings

GRACE = 5.0
ACCEPT = 0.5  # --drain-accept-s: calls are still admitted this long after the signal
SLACK = 0.3  # for the event loop of a busy machine
# How an UNAVAILABLE reads: refused by the draining server, or no server listening any more.
REFUSED = ("the server is shutting down",)
NOT_LISTENING = ("failed to connect", "Connection refused", "connections to all backends failing")


def test_sigterm_under_steady_load_completes_accepted_calls_and_exits_zero(model_repository: Path) -> None:
    args = ("--grace-seconds", str(GRACE), "--max-delay-ms", "2", "--drain-accept-s", str(ACCEPT))
    with ServerProcess(model_repository, *args) as server:
        ledger = Ledger()
        after_not_serving: list[str] = []
        seen: dict[str, float] = {}

        async def watch(client: AsyncClient) -> None:
            try:
                async for status in client.watch_health(""):
                    seen.setdefault(status, time.monotonic())
            except ClientError:
                pass  # the stream ends when the server stops

        async def worker(client: AsyncClient, until: float) -> None:
            refusals = 0
            while refusals < 3 and time.monotonic() < until:
                began = time.monotonic()
                code = await ledger.call(
                    lambda: client.classify(["a white car", "the black car is left"], model="car")
                )
                if "NOT_SERVING" in seen and began > seen["NOT_SERVING"] + ACCEPT + SLACK:
                    after_not_serving.append(code)
                    refusals += code != "OK"

        async def scenario() -> float:
            async with AsyncClient(server.target, timeout=15) as client, AsyncClient(server.target) as prober:
                watcher = asyncio.ensure_future(watch(prober))
                until = time.monotonic() + 8
                workers = [asyncio.ensure_future(worker(client, until)) for _ in range(8)]
                await asyncio.sleep(1.0)
                signalled = time.monotonic()
                server.terminate()
                await asyncio.gather(*workers)
                await asyncio.wait_for(watcher, 15)
                return signalled

        signalled = asyncio.run(scenario())
        code = server.wait(timeout=max(0.1, signalled + GRACE + 2 - time.monotonic()))
        exited = time.monotonic() - signalled
        output = server.output
    assert code == 0, output
    assert "shutting down: " in output and "stopped" in output
    assert "grace period over" not in output, "calls were cut off at the end of the grace period"
    assert ledger.lost == 0 and set(ledger.ended) <= {"OK", "UNAVAILABLE"}, (ledger.ended, ledger.details)
    assert ledger.ended["OK"] > 0 and ledger.ended["UNAVAILABLE"] > 0
    for detail in ledger.details["UNAVAILABLE"]:
        assert detail.startswith(REFUSED) or any(text in detail for text in NOT_LISTENING), detail
    assert "NOT_SERVING" in seen, "health never turned NOT_SERVING"
    assert after_not_serving and set(after_not_serving) == {"UNAVAILABLE"}, (
        "a call was admitted after NOT_SERVING + drain_accept_s"
    )
    record_figures(
        "SIGTERM under steady load (8 callers, grace 5 s)",
        **ledger.summary(),
        not_serving_after_ms=round(1000 * (seen["NOT_SERVING"] - signalled), 1),
        exit_code=code,
        exited_after_s=round(exited, 2),
    )


def test_streams_refused_while_starting_get_unavailable_never_internal(model_repository: Path) -> None:
    async def attempts() -> Counter[str]:
        codes: Counter[str] = Counter()
        async with AsyncClient(server.target) as client:
            for _ in range(30):  # the refusal races with the request in flight: repeat
                try:
                    [reply async for reply in client.stream([build_request("a white car", model="car")])]
                    codes["OK"] += 1
                except ClientError as exc:
                    codes[exc.code.name] += 1
        return codes

    with RunningServer(make_settings(model_repository), load=False) as server:
        assert asyncio.run(attempts()) == {"UNAVAILABLE": 30}
