"""Prometheus config and alert rules, and the Grafana dashboard: valid, tested, and on contract."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy import promql
from tests.deploy.conftest import REPO, require_tool

REQUIRED_ALERTS = {
    "AttnserveHighErrorRatio",
    "AttnserveHighP99Latency",
    "AttnserveQueueSaturated",
    "AttnserveInstanceDown",
}
# Each panel the dashboard must have, by the series its queries read.
REQUIRED_PANELS = {
    "requests/s by code": ["attnserve_requests_total", "by (code)"],
    "latency percentiles": [
        "histogram_quantile(0.5, sum by (le) (rate(attnserve_request_duration_seconds_bucket",
        "histogram_quantile(0.95",
        "histogram_quantile(0.99",
    ],
    "queue wait vs inference": [
        "attnserve_queue_wait_seconds_bucket",
        "attnserve_inference_duration_seconds_bucket",
    ],
    "latency by front end": [
        "sum by (le, protocol, transport) (rate(attnserve_request_duration_seconds_bucket"
    ],
    "requests by front end": ["sum by (protocol, transport, code) (rate(attnserve_requests_total"],
    "batch size": ["attnserve_batch_size_"],
    "padding ratio": ["attnserve_padding_ratio_"],
    "queue depth": ["attnserve_queue_depth"],
    "CPU fallback": ["attnserve_cpu_fallback_total"],
    "model versions loaded": ["attnserve_model_info"],
}


def promtool() -> str:
    return require_tool("promtool", "apt-get install prometheus")


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def test_promtool_accepts_the_prometheus_config() -> None:
    result = _run([promtool(), "check", "config", str(promql.PROMETHEUS_CONFIG)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_accepts_the_alert_rules() -> None:
    result = _run([promtool(), "check", "rules", str(promql.ALERTS)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rules_fire_when_they_should_and_only_then() -> None:
    result = _run([promtool(), "test", "rules", str(Path(__file__).parent / "alerts_test.yml")])
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    queries = promql.dashboard_queries()
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": promql.resolve_grafana(q.expr)}
                    for i, q in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump(rules))
    result = _run([promtool(), "check", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(queries)} rules found" in result.stdout


def test_required_alerts_exist_with_severity_and_summary() -> None:
    groups = yaml.safe_load(promql.ALERTS.read_text())["groups"]
    rules = {r["alert"]: r for g in groups for r in g["rules"]}
    assert set(rules) >= REQUIRED_ALERTS
    for name, rule in rules.items():
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name


def test_dashboard_and_alerts_use_only_metrics_of_the_contract() -> None:
    series = promql.exposed_series(promql.architecture_families())
    assert len(series) > 20, "docs/architecture.md's metric table was not found"
    problems = promql.contract_violations(promql.alert_queries() + promql.dashboard_queries(), series)
    assert not problems, "\n".join(problems)


def test_contract_check_catches_renamed_metrics_and_labels() -> None:
    series = promql.exposed_series(promql.architecture_families())
    bad = [
        promql.Query("bare histogram", "rate(attnserve_request_duration_seconds[5m])"),
        promql.Query("renamed", "sum(rate(attnserve_request_total[5m]))"),
        promql.Query("label typo", 'attnserve_queue_depth{modle="x"}'),
    ]
    problems = promql.contract_violations(bad, series)
    assert [p.split(":")[0] for p in problems] == ["bare histogram", "renamed", "label typo"]


@pytest.mark.parametrize("topic", sorted(REQUIRED_PANELS))
def test_dashboard_has_the_panel(topic: str) -> None:
    hits = promql.panels_showing(REQUIRED_PANELS[topic])
    assert hits, f"no panel shows {topic}"


def test_dashboard_layout_and_datasource() -> None:
    board = promql.dashboard()
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
    provisioned = yaml.safe_load(
        (REPO / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text()
    )
    (source,) = provisioned["datasources"]
    variable = next(v for v in board["templating"]["list"] if v["type"] == "datasource")
    assert variable["query"] == source["type"] == "prometheus"
    assert variable["current"]["value"] == source["uid"]
    for panel in promql.dashboard_panels():
        assert panel["datasource"]["uid"] == "${" + variable["name"] + "}", panel["title"]
