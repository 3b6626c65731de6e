"""The thread count: fixed when given, else the faster of 1 and every core for a timed probe."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import torch

from attnserve.training.batching import Split
from attnserve.training.models import build_model
from attnserve.training.threads import choose_threads, training_probe
from attnserve.training.train_config import TrainConfig


@pytest.fixture(autouse=True)
def _restore_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _probe(seconds_under: dict[int, float], calls: list[int]) -> Callable[[], None]:
    def probe() -> None:
        calls.append(torch.get_num_threads())
        time.sleep(seconds_under.get(torch.get_num_threads(), 0.0))

    return probe


@pytest.mark.parametrize(("slow", "expected"), [(1, 2), (2, 1)])
def test_the_faster_count_for_the_probe_is_set(slow: int, expected: int) -> None:
    calls: list[int] = []
    assert choose_threads(0, lambda: _probe({slow: 0.03}, calls), cores=2) == expected
    assert torch.get_num_threads() == expected
    assert calls == [1, 1, 1, 2, 2, 2]  # a warm-up and two timed runs under each count


def _never_built() -> Callable[[], None]:
    raise AssertionError("a probe was built where no timing was needed")


def test_a_given_count_or_a_single_core_is_set_without_building_a_probe() -> None:
    assert choose_threads(2, _never_built, cores=4) == 2 == torch.get_num_threads()
    assert choose_threads(0, _never_built, cores=1) == 1 == torch.get_num_threads()


def test_the_probe_changes_neither_the_model_nor_the_random_stream() -> None:
    torch.manual_seed(0)
    model = build_model("transformer", {"vocab_size": 50, "num_classes": 2, "max_len": 16, "dropout": 0.1})
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 17, size=40)
    ids = np.where(np.arange(16) < lengths[:, None], rng.integers(4, 50, size=(40, 16)), 0).astype(np.int32)
    split = Split(ids, lengths, rng.integers(0, 2, size=40))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = torch.get_rng_state()
    choose_threads(0, lambda: training_probe(model, split, TrainConfig(batch_size=8)), cores=2)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
