"""Start-up, shutdown and process management of the real server (in-process and as a CLI)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import onnxruntime as ort
import psutil
import pytest

from attnserve.service.client import AsyncClient, Client, ClientError, build_request
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from tests.support.process import ServerProcess
from tests.support.servers import RunningServer, free_port, make_settings, metric_samples, scrape
from tests.support.waits import until

ROOT = Path(__file__).resolve().parents[2]
NO_CUDA = "CUDAExecutionProvider" not in ort.get_available_providers()


def start_cli(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "attnserve.service.cli", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_serving(target: str, process: subprocess.Popen[str], times: int = 1, timeout: float = 90) -> None:
    """Wait until `times` consecutive health checks on fresh connections answer SERVING."""
    deadline = time.monotonic() + timeout
    streak = 0
    while streak < times:
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, "server did not become ready"
        try:
            with Client(target, timeout=2) as client:
                streak = streak + 1 if client.health() == "SERVING" else 0
        except ClientError:
            streak = 0
            time.sleep(0.1)


def metric(port: int, name: str, **labels: str) -> float:
    return sum(metric_samples(scrape(port), name, **labels))


def test_health_watch_sees_not_serving_on_shutdown(model_repository: Path) -> None:
    with RunningServer(make_settings(model_repository)) as running:
        assert running.server is not None
        server = running.server

        async def scenario() -> tuple[list[str], list[str]]:
            seen: dict[str, list[str]] = {"": [], "car": []}

            async def watch(service: str) -> None:
                async with AsyncClient(running.target) as client:
                    try:
                        async for status in client.watch_health(service):
                            seen[service].append(status)
                    except ClientError:
                        pass  # the stream ends when the server stops

            watchers = [asyncio.ensure_future(watch(name)) for name in seen]
            await until(lambda: all(seen.values()), what="both watchers' first status")
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, lambda: running.run(server.shutdown(grace=2)))
            await asyncio.wait_for(asyncio.gather(*watchers), 10)
            return seen[""], seen["car"]

        overall, car = asyncio.run(scenario())
    assert overall[0] == "SERVING" and "NOT_SERVING" in overall[1:]
    assert car[0] == "SERVING" and "NOT_SERVING" in car[1:]


def test_sigterm_with_requests_in_flight_loses_none_and_exits_zero(model_repository: Path) -> None:
    args = ("--max-delay-ms", "3000", "--max-batch-size", "64", "--grace-seconds", "10")
    # Calls are admitted for --drain-accept-s after the signal; the server logs "shutting
    # down" once that window has closed, and the late call is sent after that line.
    with ServerProcess(model_repository, *args, "--drain-accept-s", "0.1") as server:

        async def scenario() -> tuple[list[str], ClientError]:
            async with AsyncClient(server.target, timeout=30) as client:
                calls = [
                    asyncio.ensure_future(client.classify("a white car on the left", model="car"))
                    for _ in range(40)
                ]
                await until(lambda: server.metric("attnserve_queue_depth", model="car") >= 40)
                server.terminate()
                await until(lambda: "shutting down: " in server.output, what="the drain to begin")
                with pytest.raises(ClientError) as refused:
                    await client.classify("a black car", model="car")
                replies = await asyncio.gather(*calls)
                return [reply.results[0].label for reply in replies], refused.value

        labels, refused = asyncio.run(scenario())
        code = server.wait(timeout=15)
        output = server.output
    assert len(labels) == 40 and all(labels), "every accepted call must complete"
    # Never served: refused by the draining server, or by the closed port once the drain has
    # closed it, or reset while the port closes: the call (CANCELLED) or, when the client was
    # reconnecting in that instant, its connection (UNAVAILABLE, "Connection reset by peer").
    # docs/reliability.md: grpc's Python server gives no way to answer a call then.
    assert refused.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED), refused
    if refused.code == grpc.StatusCode.UNAVAILABLE:
        reasons = ("shutting down", "Connection refused", "Connection reset by peer")
        assert any(reason in refused.details for reason in reasons), refused
    assert code == 0, output
    assert "shutting down: " in output and "stopped" in output


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA: --device auto would not fall back")
def test_device_auto_falls_back_to_cpu_and_says_so(
    model_repository: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="attnserve.service.engine.models.runtime")
    with RunningServer(make_settings(model_repository, device="auto")) as server:
        assert server.value("attnserve_cpu_fallback_total") == 3  # one per session: car, pool, bow
        with Client(server.target) as client:
            assert client.model("car").provider == "CPUExecutionProvider"
            assert client.classify("a white car", model="car").results[0].label
    warnings = [r.getMessage() for r in caplog.records if "CPU fallback" in r.getMessage()]
    assert len(warnings) == 3 and "no CUDAExecutionProvider" in warnings[0]


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_device_cuda_without_cuda_fails_at_start_with_a_clear_message(model_repository: Path) -> None:
    process = start_cli(
        "--repository", str(model_repository), "--port", "0", "--metrics-port", "0", "--device", "cuda"
    )
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 1
    assert "--device cuda needs onnxruntime's CUDAExecutionProvider" in output
    assert "Traceback" not in output


def test_empty_repository_fails_at_start(tmp_path: Path) -> None:
    process = start_cli("--repository", str(tmp_path), "--port", "0", "--metrics-port", "0")
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 1
    assert "no servable model" in output and "it is empty" in output


def test_workers_share_the_port_and_aggregate_metrics(model_repository: Path) -> None:
    port, metrics_port = free_port(), free_port()
    process = start_cli(
        "--repository",
        str(model_repository),
        "--port",
        str(port),
        "--metrics-port",
        str(metrics_port),
        "--workers",
        "2",
    )
    target = f"127.0.0.1:{port}"
    try:
        wait_serving(target, process, times=8)
        workers = psutil.Process(process.pid).children()
        assert len(workers) == 2
        for _ in range(12):  # fresh connections spread over the workers
            with Client(target) as client:
                assert client.classify(["a white car", "a black car"], model="pool").results[1].label
        assert metric(metrics_port, "attnserve_requests_total", model="pool", code="OK") == 12
        assert metric(metrics_port, "attnserve_texts_total", model="pool", code="OK") == 24
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
        assert process.returncode == 0, output
        assert output.count("stopped") == 2
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_open_stream_is_answered_then_ended_unavailable_on_shutdown(model_repository: Path) -> None:
    with RunningServer(make_settings(model_repository)) as running:
        assert running.server is not None
        server = running.server

        async def scenario() -> tuple[list[str], ClientError]:
            hold = asyncio.Event()

            async def requests() -> AsyncIterator[pb.ClassifyRequest]:
                for i in range(5):
                    yield build_request("a white car", model="car", request_id=str(i))
                await hold.wait()  # keep the stream open, as a long-lived client would

            ids: list[str] = []
            async with AsyncClient(running.target) as client:
                with pytest.raises(ClientError) as ended:
                    async for reply in client.stream(requests()):
                        ids.append(reply.request_id)
                        if len(ids) == 5:
                            loop = asyncio.get_running_loop()
                            shutdown = loop.run_in_executor(
                                None, lambda: running.run(server.shutdown(grace=60), timeout=90)
                            )
                await shutdown
                hold.set()
            return ids, ended.value

        # An open stream must not hold shutdown for the whole grace period (60 s): the
        # stream ends and the shutdown finishes well before it.
        try:
            ids, ended = asyncio.run(asyncio.wait_for(scenario(), 30))
        except TimeoutError:
            pytest.fail("the open stream held shutdown for half its grace period (30 of 60 s)")
    assert ids == ["0", "1", "2", "3", "4"]
    assert ended.code == grpc.StatusCode.UNAVAILABLE and "shutting down" in ended.details


def test_a_shutdown_without_grace_and_without_calls_reports_nothing_cut_off(
    model_repository: Path, caplog: pytest.LogCaptureFixture
) -> None:
    running = RunningServer(make_settings(model_repository, drain_accept_s=0.0))
    with running:
        assert running.server is not None
        with caplog.at_level(logging.INFO, logger="attnserve.service.server"):
            running.run(running.server.shutdown(grace=0.0))
    messages = [record.getMessage() for record in caplog.records]
    assert "stopped" in messages, messages
    assert not any("grace period over" in message for message in messages), messages
