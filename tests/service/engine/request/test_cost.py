"""Each served version is timed when it opens, per class of attention request, so that the lone
path can predict a call's own run time; a version not yet timed predicts no call as quick."""

from __future__ import annotations

import math
from pathlib import Path

from prometheus_client import CollectorRegistry

from attnserve.service.common.vocabulary import AttentionMode
from attnserve.service.engine.metrics import Metrics
from attnserve.service.engine.models.loading import LoadedModel, load_model
from attnserve.service.engine.request.cost import CostClass, TextCost, cost_class
from tests.support.servers import make_settings


def _load(repository: Path, name: str) -> LoadedModel:
    settings = make_settings(repository)
    return load_model(repository / name / "1", settings, Metrics(CollectorRegistry()), name=name, version=1)


def test_the_class_follows_what_a_text_asks_of_the_attention() -> None:
    assert cost_class(AttentionMode.NONE, 0) is CostClass.LOGITS
    assert cost_class(AttentionMode.NONE, 3) is CostClass.MAP  # top tokens come from the pooled map
    assert cost_class(AttentionMode.POOLED, 0) is CostClass.MAP
    assert cost_class(AttentionMode.LAST_LAYER, 0) is CostClass.MAP
    assert cost_class(AttentionMode.ALL, 0) is CostClass.ALL
    assert cost_class(AttentionMode.ROLLOUT, 2) is CostClass.ROLLOUT


def test_every_mode_a_model_answers_is_timed_and_none_other(model_repository: Path) -> None:
    car, bow = _load(model_repository, "car"), _load(model_repository, "bow")
    car_cost, bow_cost = TextCost(), TextCost()
    assert math.isinf(car_cost.predict(AttentionMode.NONE, 0, 5))  # not timed yet: never quick
    car_cost.measure(car)
    bow_cost.measure(bow)
    longest = car.manifest.max_len
    for mode in AttentionMode:
        for length in (1, longest // 2, longest, 10 * longest):
            assert 0 < car_cost.predict(mode, 0, length) < math.inf, (mode, length)
    assert 0 < bow_cost.predict(AttentionMode.NONE, 0, 5) < math.inf
    assert math.isinf(bow_cost.predict(AttentionMode.POOLED, 0, 5))  # bow_mlp has no attention
    assert math.isinf(bow_cost.predict(AttentionMode.NONE, 1, 5))
