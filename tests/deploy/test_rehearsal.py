"""Compose rehearsal: the trainer and server of docker-compose.yml run here as processes (their
own commands and environment, volumes as folders, ports remapped to free ones on 127.0.0.1),
scraped by a real Prometheus using the repository's prometheus.yml and alert rules.

Runs once the service's console scripts are installed; bounded to well under a minute.
"""

from __future__ import annotations

import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kit.ports import free_port
from tests.deploy import promql
from tests.deploy.compose import environment, load_compose, parse_duration
from tests.deploy.conftest import VENV_BIN, require_tool
from tests.deploy.rehearsal import (
    TINY_TRAINING,
    LocalService,
    PrometheusAPI,
    finite_values,
    healthcheck,
    prepare,
    wait_until,
)

SCRIPTS = ("attnserve-train", "attnserve-export", "attnserve-serve", "attnserve-client")
MISSING = [s for s in SCRIPTS if not (VENV_BIN / s).exists()]
TEXTS = [
    "the white car is on the left of the black car",
    "the black car is left of the red car",
    "a red car sits to the right of a blue car",
]

pytestmark = [
    pytest.mark.rehearsal,
    pytest.mark.skipif(
        bool(MISSING), reason=f"the service is not installed yet: {', '.join(MISSING)} missing"
    ),
]


@dataclass
class Stack:
    compose: dict[str, Any]
    trainer: LocalService
    server: LocalService
    server_process: subprocess.Popen[bytes]
    server_log: Path
    grpc_target: str
    metrics_url: str
    prometheus: PrometheusAPI
    trainer_runs: list[subprocess.CompletedProcess[str]]


def _log_tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _prometheus_config(compose: dict[str, Any], metrics_port: int, prometheus_port: int) -> dict[str, Any]:
    """prometheus.yml with DNS discovery of `server` replaced by the one local replica."""
    config: dict[str, Any] = yaml.safe_load(promql.PROMETHEUS_CONFIG.read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    config["rule_files"] = [str(promql.PROMETHEUS_CONFIG.parent / f) for f in config["rule_files"]]
    container_port = environment(compose["services"]["server"])["ATTNSERVE_METRICS_PORT"]
    for job in config["scrape_configs"]:
        if "dns_sd_configs" in job:
            (sd,) = job.pop("dns_sd_configs")
            assert sd["names"] == ["server"] and str(sd["port"]) == container_port
            job["static_configs"] = [{"targets": [f"127.0.0.1:{metrics_port}"]}]
        else:
            job["static_configs"] = [{"targets": [f"127.0.0.1:{prometheus_port}"]}]
    return config


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus_bin = require_tool("prometheus", "apt-get install prometheus")
    root = tmp_path_factory.mktemp("rehearsal")
    compose = load_compose({"ATTNSERVE_TRAIN_ARGS": TINY_TRAINING})
    services = compose["services"]

    trainer = prepare("trainer", services["trainer"], root / "volumes", {})
    runs = []
    for _ in range(2):  # the second run must find the bundle and leave it alone
        runs.append(
            subprocess.run(trainer.command, env=trainer.env, capture_output=True, text=True, timeout=90)
        )
        assert runs[-1].returncode == 0, runs[-1].stdout[-2000:] + runs[-1].stderr[-3000:]

    grpc_port, metrics_port, prometheus_port = free_port(), free_port(), free_port()
    server = prepare(
        "server",
        services["server"],
        root / "volumes",
        {
            "ATTNSERVE_HOST": "127.0.0.1",
            "ATTNSERVE_PORT": str(grpc_port),
            "ATTNSERVE_METRICS_PORT": str(metrics_port),
            "ATTNSERVE_HTTP_PORT": str(free_port()),
        },
    )
    server_log = root / "server.log"
    prometheus_log = root / "prometheus.log"
    config_path = root / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(_prometheus_config(compose, metrics_port, prometheus_port)))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        with server_log.open("wb") as log:
            processes.append(
                subprocess.Popen(server.command, env=server.env, stdout=log, stderr=subprocess.STDOUT)
            )
        with prometheus_log.open("wb") as log:
            processes.append(
                subprocess.Popen(
                    [
                        prometheus_bin,
                        f"--config.file={config_path}",
                        f"--storage.tsdb.path={root / 'tsdb'}",
                        f"--web.listen-address=127.0.0.1:{prometheus_port}",
                        "--log.level=warn",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        api = PrometheusAPI(f"http://127.0.0.1:{prometheus_port}")
        assert wait_until(api.ready, 20), f"prometheus did not start:\n{_log_tail(prometheus_log)}"
        yield Stack(
            compose,
            trainer,
            server,
            processes[0],
            server_log,
            f"127.0.0.1:{grpc_port}",
            f"http://127.0.0.1:{metrics_port}/metrics",
            api,
            runs,
        )
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)


def test_trainer_fills_an_empty_repository_then_leaves_it_alone(stack: Stack) -> None:
    repository = Path(stack.trainer.env["ATTNSERVE_REPOSITORY"])
    name = stack.trainer.env["ATTNSERVE_MODEL_NAME"]
    assert list(repository.glob(f"{name}/*/bundle.json")), f"no bundle in {repository}"
    first, second = stack.trainer_runs
    assert "training" in first.stdout and "already holds bundles" in second.stdout
    assert len(list(Path(stack.trainer.env["ATTNSERVE_RUNS_DIR"]).iterdir())) == 1, (
        "the second run trained again"
    )


def test_server_becomes_healthy_by_its_compose_healthcheck(stack: Stack) -> None:
    service = stack.compose["services"]["server"]

    def healthy() -> bool:
        assert stack.server_process.poll() is None, f"server exited:\n{_log_tail(stack.server_log)}"
        return healthcheck(service, stack.server.env, timeout=10).returncode == 0

    assert wait_until(healthy, 30, interval=0.5), f"never healthy:\n{_log_tail(stack.server_log)}"


def test_prometheus_scrapes_the_server_and_quantiles_have_data(stack: Stack) -> None:
    from attnserve.service.client import Client

    model = stack.trainer.env["ATTNSERVE_MODEL_NAME"]
    up = 'up{job="attnserve"}'
    assert wait_until(lambda: finite_values(stack.prometheus.query(up)) == [1.0], 20), stack.prometheus.query(
        up
    )
    p99 = next(
        q.expr
        for q in promql.dashboard_queries()
        if "histogram_quantile(0.99" in q.expr and "attnserve_request_duration_seconds_bucket" in q.expr
    )
    queries = [
        promql.resolve_grafana(p99),
        promql.resolve_grafana(
            next(
                q.expr for q in promql.dashboard_queries() if "attnserve_queue_wait_seconds_bucket" in q.expr
            )
        ),
    ]
    with Client(stack.grpc_target, timeout=10) as client:

        def answered() -> bool:
            for _ in range(10):
                assert client.classify(TEXTS, model=model).results[0].label
            return all(finite_values(stack.prometheus.query(q)) for q in queries)

        assert wait_until(answered, 25, interval=0.5), [stack.prometheus.query(q) for q in queries]
    for query in promql.dashboard_queries():  # every panel evaluates (errors raise)
        stack.prometheus.query(promql.resolve_grafana(query.expr))


def test_alert_rules_load_and_evaluate_cleanly(stack: Stack) -> None:
    def evaluated() -> list[dict[str, Any]]:
        groups = stack.prometheus.get("/api/v1/rules")["groups"]
        return [r for g in groups for r in g["rules"]]

    assert wait_until(lambda: all(r.get("lastEvaluation", "0001").startswith("20") for r in evaluated()), 15)
    rules = evaluated()
    assert {r["name"] for r in rules} == {q.source.removeprefix("alert ") for q in promql.alert_queries()}
    assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
    firing = [r["name"] for r in rules if r["state"] == "firing"]
    assert "AttnserveInstanceDown" not in firing and "AttnserveNoReplicas" not in firing


def test_dashboard_and_alerts_read_only_metrics_the_live_server_exports(stack: Stack) -> None:
    with urllib.request.urlopen(stack.metrics_url, timeout=5) as reply:
        text = reply.read().decode()
    live: dict[str, frozenset[str] | None] = {}
    families = [f for f in text_string_to_metric_families(text) if not f.name.endswith("_created")]
    for family in families:
        labels = frozenset(k for s in family.samples for k in s.labels if k != "le")
        kind = {"histogram": "histogram", "counter": "counter"}.get(family.type, "gauge")
        name = family.name + "_total" if kind == "counter" else family.name
        for series, series_labels in promql.Family(name, kind, labels).sample_names().items():
            live[series] = series_labels if family.samples else None
    problems = promql.contract_violations(promql.alert_queries() + promql.dashboard_queries(), live)
    assert not problems, "\n".join(problems)
    documented = promql.exposed_series(promql.architecture_families())
    assert sorted(set(documented) - set(live)) == [], "docs/architecture.md lists metrics the server lacks"


def test_server_drains_and_exits_zero_within_the_stop_grace_period(stack: Stack) -> None:
    # What `docker compose stop` does: SIGTERM, then SIGKILL after stop_grace_period.
    stop_grace = parse_duration(stack.compose["services"]["server"]["stop_grace_period"])
    stack.server_process.send_signal(signal.SIGTERM)
    code = stack.server_process.wait(timeout=stop_grace)
    assert code == 0, _log_tail(stack.server_log)
