"""Each served version is timed when it opens, per class of attention request, so that the lone
path can predict a call's own run time; a version not yet timed predicts no call as quick."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry

from attnserve.service.common.vocabulary import AttentionMode
from attnserve.service.engine.metrics import Metrics
from attnserve.service.engine.models.loading import LoadedModel, load_model
from attnserve.service.engine.request.cost import SHORT_TOKENS, CostClass, TextCost, cost_class
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
    assert car_cost.seconds == {}  # not timed yet: every call unknown, never quick
    car_cost.measure(car)
    bow_cost.measure(bow)
    longest = car.manifest.max_len
    for mode in AttentionMode:
        for top in (False, True):
            seconds = car_cost.seconds[mode, top]
            assert len(seconds) == longest + 1  # every length a text can have
            assert all(0 < second < math.inf for second in seconds), (mode, top)
    assert len(bow_cost.seconds[AttentionMode.NONE, False]) == bow.manifest.max_len + 1
    assert set(bow_cost.seconds) == {(AttentionMode.NONE, False)}  # bow_mlp has no attention


def test_a_request_costs_what_its_class_costs_on_the_chord_of_the_two_lengths(model_repository: Path) -> None:
    car = _load(model_repository, "car")
    cost = TextCost()
    cost.measure(car)
    seconds = cost.seconds
    # Requests of one class share their timings; top tokens alone cost a map.
    assert seconds[AttentionMode.NONE, True] is seconds[AttentionMode.POOLED, False]
    assert seconds[AttentionMode.LAST_LAYER, True] is seconds[AttentionMode.LAST_LAYER, False]
    for line in {id(line): line for line in seconds.values()}.values():
        assert line[: SHORT_TOKENS + 1] == [line[SHORT_TOKENS]] * (SHORT_TOKENS + 1)  # shorter: as short
        steps = np.diff(line[SHORT_TOKENS:])
        np.testing.assert_allclose(steps, steps[0])  # a straight line up to the longest
