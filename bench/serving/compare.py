"""The alternatives a user would pick instead, under the same closed-loop load: the naive
baseline server (systems/naive_server.py) and MLServer (systems/mlserver.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench.serving.plan import Plan
from bench.serving.results import Point
from bench.serving.sweep import closed_point, log_point
from bench.serving.systems.mlserver import mlserver
from bench.serving.systems.naive_server import naive

NAIVE, MLSERVER = "naive", "MLServer"


def naive_points(
    bundle: Path, model: str, texts: Sequence[str], plan: Plan, *, has_attention: bool
) -> list[Point]:
    points = []
    with naive(bundle) as server:
        for n in plan.texts_per_request:
            for c in plan.concurrencies:
                for attention in (False, True) if has_attention else (False,):
                    point = closed_point(server, "native", model, texts, n, attention, c, plan,
                                         system=NAIVE, batching=False, workers=1)  # fmt: skip
                    points.append(point)
                    log_point(point)
    return points


def mlserver_points(python: Path, bundle: Path, model: str, texts: Sequence[str], plan: Plan) -> list[Point]:
    """V2 ModelInfer (TEXT in; LABEL and PROBABILITIES out), adaptive batching up to 32 texts."""
    points = []
    with mlserver(python, bundle, model) as server:
        for n in plan.texts_per_request:
            for c in plan.concurrencies:
                point = closed_point(server, "v2", model, texts, n, False, c, plan,
                                     system=MLSERVER, batching=True, workers=1)  # fmt: skip
                points.append(point)
                log_point(point)
    return points
