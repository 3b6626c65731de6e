"""`--workers N`: one dead worker does not take the service down.

A supervisor with two workers serves callers that each hold their own connection; one
worker is SIGKILLed. Only calls on the killed worker's connections may fail, the other
worker keeps answering, and the supervisor starts a replacement that serves. A worker
that keeps dying is a crash loop: the supervisor stops and exits non-zero.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from collections import Counter
from pathlib import Path

import grpc

from attnserve.service.client import AsyncClient, Client, ClientError
from tests.support.load import record_figures
from tests.support.process import ServerProcess
from tests.support.waits import until, wait_until

CALLERS = 8
# Each caller its own TCP connection (grpc would otherwise share one between channels).
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


def children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(child) for child in text.split()]


def connections(pid: int, port: int) -> int:
    """Established TCP connections `pid` holds on local port `port` (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


def wait_ready(server: ServerProcess, pid: int, timeout: float) -> None:
    """Return once worker `pid` logged that it is ready."""
    pattern = re.compile(rf"worker {pid} .*ready in")
    wait_until(lambda: pattern.search(server.output) is not None, timeout, 0.05, f"worker {pid} ready")


async def reconnected(channel: grpc.aio.Channel) -> None:
    """Wait, as a client calling with wait_for_ready would, for a new connection after a
    call failed on a reset one."""
    state = channel.get_state()
    if state is grpc.ChannelConnectivity.READY:
        # The call's failure can arrive before the channel has seen its connection reset; a
        # call sent now would fail on the same dead connection without reaching a server.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(channel.wait_for_state_change(state), 2)
    # A channel whose first reconnect fails backs off (about 1 s) and fails every call
    # meanwhile without sending it; those are not calls the server lost either.
    await asyncio.wait_for(channel.channel_ready(), 15)


def test_sigkill_of_one_worker_under_load_fails_only_its_calls(model_repository: Path) -> None:
    with ServerProcess(model_repository, "--workers", "2", "--max-delay-ms", "2") as server:
        workers = children(server.pid)
        assert len(workers) == 2
        for pid in workers:
            wait_ready(server, pid, 60)
        outcomes: list[list[tuple[float, str]]] = [[] for _ in range(CALLERS)]
        stop = asyncio.Event()

        async def caller(index: int) -> None:
            async with AsyncClient(server.target, timeout=10, options=OWN_CONNECTION) as client:
                while not stop.is_set():
                    try:
                        await client.classify(["a white car", "the black car is left"], model="car")
                        code = "OK"
                    except ClientError as exc:
                        code = exc.code.name
                    outcomes[index].append((time.monotonic(), code))
                    if code != "OK":
                        await reconnected(client.channel)

        def new_workers() -> list[int]:
            return [pid for pid in children(server.pid) if pid not in workers]

        async def scenario() -> tuple[int, int, float, float, int]:
            tasks = [asyncio.ensure_future(caller(i)) for i in range(CALLERS)]
            # Under load: every caller answered on its own connection, each held by one worker.
            await until(
                lambda: (
                    all(calls for calls in outcomes)
                    and sum(connections(pid, server.port) for pid in workers) >= CALLERS
                ),
                30,
                0.05,
                "every caller answered",
            )
            held = {pid: connections(pid, server.port) for pid in workers}
            victim = max(held, key=lambda pid: held[pid])
            killed = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            await until(lambda: bool(new_workers()), 30, 0.05, "a replacement worker started")
            replacement = new_workers()[0]
            await asyncio.to_thread(wait_ready, server, replacement, 60)
            back = time.monotonic()
            # Every caller answered again after the restart, its connection lost or not.
            await until(
                lambda: all(any(at > back and code == "OK" for at, code in calls) for calls in outcomes),
                30,
                0.05,
                "every caller answered after the restart",
            )
            stop.set()
            await asyncio.gather(*tasks)
            return victim, held[victim], killed, back, replacement

        try:
            victim, victim_connections, killed, back, replacement = asyncio.run(scenario())
        except (AssertionError, OSError) as exc:  # a worker gone early: the server's log says why
            raise AssertionError(f"{exc}\n--- server output ---\n{server.output[-4000:]}") from exc
        assert server.process is not None and server.process.poll() is None, server.output
        assert f"worker pid {victim} exited" in server.output
    codes = Counter(code for calls in outcomes for _, code in calls)
    failing = [i for i, calls in enumerate(outcomes) if any(code != "OK" for _, code in calls)]
    during = sum(1 for calls in outcomes for at, code in calls if killed < at < back and code == "OK")
    record_figures(
        "SIGKILL of 1 of 2 workers (8 callers, one connection each)",
        **dict(sorted(codes.items())),
        victim_connections=victim_connections,
        failing_callers=len(failing),
        ok_while_restarting=during,
        back_after_s=round(back - killed, 2),
    )
    assert set(codes) <= {"OK", "UNAVAILABLE"}, codes
    assert codes["OK"] > 0 and during > 0, "the surviving worker did not keep serving"
    # Failures only on the killed worker's connections: at most the call in flight on each.
    assert len(failing) <= victim_connections, (failing, victim_connections)
    for index in failing:
        lost = [(round(at - killed, 3), code) for at, code in outcomes[index] if code != "OK"]
        assert len(lost) <= 1, (index, lost)
    assert replacement != victim


def test_a_crash_loop_stops_the_supervisor_with_status_1(model_repository: Path) -> None:
    args = ("--workers", "2", "--worker-max-restarts", "1", "--worker-restart-window-s", "120")
    with ServerProcess(model_repository, *args) as server:
        first = children(server.pid)
        for pid in first:
            wait_ready(server, pid, 60)
        os.kill(first[0], signal.SIGKILL)
        wait_until(
            lambda: any(p not in first for p in children(server.pid)), 30, 0.05, "a replacement started"
        )
        os.kill(first[1], signal.SIGKILL)  # the second death within the window: a crash loop
        code = server.wait(timeout=30)
        output = server.output
    assert code == 1, output
    assert "crash loop" in output


def test_workers_serve_with_a_queue_smaller_than_the_default_attribution_rows(model_repository: Path) -> None:
    # Left unset, max_attribution_rows (512) follows a smaller max_queue; each worker must read
    # the operator's flags as they were given, not every value the supervisor ended up with.
    with ServerProcess(model_repository, "--workers", "2", "--max-queue", "100") as server:
        workers = children(server.pid)
        assert len(workers) == 2
        for pid in workers:
            wait_ready(server, pid, 60)
        for _ in range(6):  # fresh connections spread over the workers
            with Client(server.target, timeout=30) as client:
                assert client.classify(["a white car", "a black car"], model="car").results[1].label
        assert children(server.pid) == workers, server.output
        assert "exited" not in server.output
