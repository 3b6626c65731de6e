"""The drift series: the server's families match the documented contract, the dashboard shows
them against training's, and the drift alerts fire when they should and only then."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from prometheus_client import CollectorRegistry

from attnserve.service.observe.drift import DriftMetrics
from tests.deploy import promql
from tests.deploy.conftest import require_tool

DRIFT_ALERTS = {"AttnserveLabelShareDrift", "AttnserveUnknownWordShareHigh"}
# Each drift panel, by the series its queries must read: serving and training side by side.
DRIFT_PANELS = {
    "label share": ["attnserve_predictions_total", "attnserve_training_label_share"],
    "unknown words": ["attnserve_text_unknown_ratio_sum", "attnserve_training_unknown_ratio_mean"],
    "truncation": ["attnserve_truncated_texts_total", "attnserve_training_truncated_ratio"],
    "confidence": ["attnserve_prediction_confidence_bucket", "attnserve_training_confidence_mean"],
    "tokens per text": ["attnserve_text_tokens_bucket", "attnserve_training_text_tokens_mean"],
}


def _served_families() -> dict[str, tuple[str, frozenset[str]]]:
    """What a server with one bound, used model version exposes: {family: (type, labels)}."""
    registry = CollectorRegistry()
    seen = DriftMetrics(registry).bind("car", 1, ["a", "b"], unk_id=1)
    seen.observe_batch(np.array([[0.9, 0.1]], np.float32), np.array([[3, 1]]), np.array([[1, 1]]))
    families: dict[str, tuple[str, frozenset[str]]] = {}
    for family in registry.collect():
        labels = frozenset(k for s in family.samples for k in s.labels if k != "le")
        name = family.name + "_total" if family.type == "counter" else family.name
        families[name] = (family.type, labels)
    return families


def test_every_drift_family_is_in_the_documented_contract() -> None:
    documented = promql.architecture_families()
    served = _served_families()
    assert len(served) == 10
    for name, (kind, labels) in served.items():
        assert name in documented, f"docs/architecture.md does not list {name}"
        assert documented[name].kind == kind, name
        assert labels <= documented[name].labels, f"{name}: labels {sorted(labels)}"


@pytest.mark.parametrize("topic", sorted(DRIFT_PANELS))
def test_dashboard_shows_serving_against_training(topic: str) -> None:
    hits = promql.panels_showing(DRIFT_PANELS[topic])
    assert hits, f"no panel shows {topic} against training"


def test_drift_alerts_exist_with_severity_and_summary() -> None:
    groups = yaml.safe_load(promql.ALERTS.read_text())["groups"]
    rules = {r["alert"]: r for g in groups for r in g["rules"]}
    assert set(rules) >= DRIFT_ALERTS
    for name in DRIFT_ALERTS:
        assert rules[name]["labels"]["severity"] == "warning"
        assert "training" in rules[name]["expr"] and rules[name]["for"] == "30m"


def test_drift_alerts_fire_when_they_should_and_only_then() -> None:
    promtool = require_tool("promtool", "apt-get install prometheus")
    result = subprocess.run(
        [promtool, "test", "rules", str(Path(__file__).parent / "drift_alerts_test.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
