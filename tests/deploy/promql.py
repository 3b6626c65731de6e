"""The PromQL that deploy/ ships (alert rules, Grafana panels) and the metric contract it must meet."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "attnserve.json"
ARCHITECTURE = REPO / "docs" / "architecture.md"

# Grafana variables replaced by what they stand for when the dashboard runs.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__range": "1h",
    "$__interval": "15s",
    "$model": ".*",
    "$instance": ".*",
    "$protocol": ".*",
}
# Labels Prometheus itself attaches to every scraped series.
TARGET_LABELS = {"instance", "job", "stack"}
_METRIC = re.compile(r"\b(attnserve_[a-z0-9_]+)\b")
_SELECTOR = re.compile(r"\b(attnserve_[a-z0-9_]+)\{([^}]*)\}")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


@dataclass(frozen=True)
class Query:
    source: str  # where it comes from, for messages
    expr: str


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # histogram | counter | gauge
    labels: frozenset[str]

    def sample_names(self) -> dict[str, frozenset[str]]:
        """Series names the family exposes in the text format, with their labels."""
        if self.kind == "histogram":
            return {
                self.name + "_bucket": self.labels | {"le"},
                self.name + "_sum": self.labels,
                self.name + "_count": self.labels,
            }
        if self.kind == "counter":
            base = self.name.removesuffix("_total")
            return {base + "_total": self.labels}
        return {self.name: self.labels}


def alert_queries() -> list[Query]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [Query(f"alert {rule['alert']}", rule["expr"]) for group in groups for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def panels_showing(needles: Iterable[str]) -> list[str]:
    """Titles of the panels whose queries, between them, name every one of `needles`."""
    wanted = tuple(needles)
    return [
        p["title"]
        for p in dashboard_panels()
        if all(any(n in t["expr"] for t in p["targets"]) for n in wanted)
    ]


def dashboard_queries() -> list[Query]:
    return [
        Query(f"panel {panel['title']!r} target {target['refId']}", target["expr"])
        for panel in dashboard_panels()
        for target in panel.get("targets", [])
    ]


def resolve_grafana(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    if "$" in expr:
        raise ValueError(f"unresolved Grafana variable in {expr!r}")
    return expr


def metric_names(expr: str) -> set[str]:
    return set(_METRIC.findall(expr))


def selector_labels(expr: str) -> list[tuple[str, set[str]]]:
    """(metric, label names matched in its {...} selector) for each selector in `expr`."""
    return [(metric, set(_MATCHER.findall(body))) for metric, body in _SELECTOR.findall(expr)]


def architecture_families() -> dict[str, Family]:
    """The metric table of docs/architecture.md: `| name | type | labels |` rows."""
    families: dict[str, Family] = {}
    row = re.compile(r"^\|\s*`(attnserve_[a-z0-9_]+)`\s*\|\s*(\w+)[^|]*\|\s*([^|]*)\|", re.MULTILINE)
    for name, kind, labels in row.findall(ARCHITECTURE.read_text()):
        label_set = frozenset(
            part.strip() for part in labels.split(",") if re.fullmatch(r"\s*[a-z_]+\s*", part)
        )
        families[name] = Family(name, kind, label_set)
    return families


def exposed_series(families: dict[str, Family]) -> dict[str, frozenset[str] | None]:
    series: dict[str, frozenset[str] | None] = {}
    for family in families.values():
        series.update(family.sample_names())
    return series


def contract_violations(queries: list[Query], series: dict[str, frozenset[str] | None]) -> list[str]:
    """Every metric a query names must be an exposed series; every label it matches must exist.

    A series mapped to None has unknown labels (a live family with no samples yet).
    """
    problems = []
    for query in queries:
        for name in sorted(metric_names(query.expr) - set(series)):
            problems.append(f"{query.source}: {name} is not a series the server exposes")
        for name, labels in selector_labels(query.expr):
            known = series.get(name)
            if known is None:
                continue
            unknown = labels - known - TARGET_LABELS
            if unknown:
                problems.append(f"{query.source}: {name} has no label(s) {sorted(unknown)}")
    return problems
