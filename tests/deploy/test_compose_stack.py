"""docker-compose.yml run for real with podman-compose (or docker compose): the trainer trains
and exports a small model into the compose volume, the server turns healthy on it, Prometheus
(the local image of deploy/Dockerfile.prometheus) scrapes it, and the `load` profile's Locust
run ends with its counts reconciled against the server's metrics (exit status 0).

Compose's `service_healthy` conditions need podman 4.6 (podman-compose skips them on older
podman, with a warning), and podman runs no health check by itself without systemd: so the
services start in the order their conditions impose, and the test runs the health check.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kit.ports import free_port
from tests.deploy.compose import COMPOSE_FILE, parse_duration
from tests.deploy.conftest import REPO, BuiltImages, require_tool
from tests.deploy.containers import Engine
from tests.deploy.rehearsal import TINY_TRAINING, PrometheusAPI, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

LOAD_RUN_TIME = "10s"
STEP_TIMEOUT_S = 600


@dataclass
class Stack:
    engine: Engine
    command: list[str]
    env: dict[str, str]
    project: str
    log: Path

    def compose(self, *args: str, timeout: float = STEP_TIMEOUT_S) -> None:
        with self.log.open("a") as out:
            out.write(f"\n$ compose {' '.join(args)}\n")
            out.flush()
            done = subprocess.run(
                [*self.command, "-p", self.project, "-f", str(COMPOSE_FILE), *args],
                cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
            )  # fmt: skip
        assert done.returncode == 0, f"compose {' '.join(args)} failed:\n{self.log.read_text()[-4000:]}"

    def container(self, service: str) -> str:
        names = self.engine.run(
            "ps", "--all", "--format", "{{.Names}}",
            "--filter", f"label=com.docker.compose.project={self.project}",
            "--filter", f"label=com.docker.compose.service={service}",
        ).stdout.split()  # fmt: skip
        assert len(names) == 1, f"{service}: containers {names}"
        return names[0]

    def exit_code(self, service: str, timeout: float) -> int:
        name = self.container(service)
        code = int(self.engine.run("wait", name, timeout=timeout).stdout.strip())
        assert code == 0, f"{service} exited {code}:\n{self.engine.logs(name)[-4000:]}"
        return code


def _compose_command(engine: Engine) -> list[str]:
    if engine.name == "docker":
        return ["docker", "compose"]
    return [require_tool("podman-compose", "pip install podman-compose (the dev extra)")]


@pytest.fixture(scope="module")
def stack(
    container_engine: Engine, images: BuiltImages, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    env = dict(container_engine.env) | {
        "ATTNSERVE_IMAGE": images.serve,
        "ATTNSERVE_TRAIN_IMAGE": images.train,
        "ATTNSERVE_LOADTEST_IMAGE": images.loadtest,
        "PROMETHEUS_IMAGE": images.prometheus,
        "PROMETHEUS_PORT": str(free_port()),
        "ATTNSERVE_TRAIN_ARGS": TINY_TRAINING,
        "ATTNSERVE_GRACE_SECONDS": "5",
        "ATTNSERVE_STOP_GRACE_PERIOD": "10s",
        "LOADTEST_RUN_TIME": LOAD_RUN_TIME,
        "LOADTEST_USERS": "4",
        "LOADTEST_SPAWN_RATE": "4",
        # The machine may be shared and saturated: calls keep a deadline, not a latency target.
        "LOADTEST_DEADLINE_MS": "5000",
    }
    project = f"attnserve-test-{uuid.uuid4().hex[:8]}"
    log = tmp_path_factory.mktemp("compose") / "compose.log"
    running = Stack(container_engine, _compose_command(container_engine), env, project, log)
    try:
        yield running
    finally:
        running.compose("--profile", "load", "down", "--volumes", "--timeout", "10", timeout=300)


def test_trainer_server_prometheus_and_load_profile(stack: Stack) -> None:
    start = time.monotonic()
    # trainer: service_completed_successfully gates the server.
    stack.compose("up", "--detach", "--no-build", "trainer")
    stack.exit_code("trainer", STEP_TIMEOUT_S)
    # server (and Prometheus): service_healthy gates the load test.
    stack.compose("up", "--detach", "--no-build", "--no-deps", "server", "prometheus")
    server = stack.container("server")
    status = stack.engine.wait_healthy(server, 120)
    assert status == "healthy", f"server is {status}:\n{stack.engine.logs(server)[-3000:]}"
    prometheus = PrometheusAPI(f"http://127.0.0.1:{stack.env['PROMETHEUS_PORT']}")
    assert wait_until(prometheus.ready, 60), stack.engine.logs(stack.container("prometheus"))[-3000:]

    def attnserve_target_up() -> bool:
        targets = prometheus.get("/api/v1/targets")["activeTargets"]
        return any(t["labels"]["job"] == "attnserve" and t["health"] == "up" for t in targets)

    # DNS discovery and the scrape both run every 15 s (deploy/prometheus/prometheus.yml).
    assert wait_until(attnserve_target_up, 90, interval=1.0), prometheus.get("/api/v1/targets")
    # The load profile: a bounded headless Locust run whose counts must match the server's.
    stack.compose("--profile", "load", "up", "--detach", "--no-build", "--no-deps", "loadtest")
    stack.exit_code("loadtest", parse_duration(LOAD_RUN_TIME) + 180)

    def requests_scraped() -> bool:
        result = prometheus.query('sum(attnserve_requests_total{code="OK"})')
        return bool(result) and float(result[0]["value"][1]) > 0

    assert wait_until(requests_scraped, 60, interval=1.0), "Prometheus never saw the load test's requests"
    print(f"compose stack: trained, served, scraped and load-tested in {time.monotonic() - start:.0f} s")
