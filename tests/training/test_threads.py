"""The thread count: fixed when given, else the faster of 1 and every core for a timed probe,
timed again as the run goes."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import cast

import numpy as np
import pytest
import torch

from attnserve.training.loop.batching import Split
from attnserve.training.loop.config import TrainConfig
from attnserve.training.loop.threads import Threads, training_probe
from attnserve.training.models import TransformerClassifier, build_model


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
    assert Threads(0, lambda: _probe({slow: 0.03}, calls), cores=2).start() == expected
    assert torch.get_num_threads() == expected
    assert calls == [1, 1, 1, 2, 2, 2]  # a warm-up and two timed runs under each count


def _never_built() -> Callable[[], None]:
    raise AssertionError("a probe was built where no timing was needed")


def test_a_given_count_or_a_single_core_is_set_without_building_a_probe() -> None:
    assert Threads(2, _never_built, cores=4).start() == 2 == torch.get_num_threads()
    assert Threads(0, _never_built, cores=1).start() == 1 == torch.get_num_threads()


def test_a_given_count_above_the_usable_cores_is_lowered_to_them(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="attnserve.training.loop.threads")
    assert Threads(4, _never_built, cores=2).start() == 2 == torch.get_num_threads()
    assert [r.getMessage() for r in caplog.records] == ["torch threads: 2, the usable cores (4 asked)"]


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_count_is_timed_again_once_due_and_follows_the_probe(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="attnserve.training.loop.threads")
    calls: list[int] = []
    under = {2: 0.03}  # two threads slow: one is chosen
    clock = _Clock()
    threads = Threads(0, lambda: _probe(under, calls), cores=2, recheck_seconds=60, clock=clock)
    assert threads.start() == 1 and len(calls) == 6
    clock.now = 59.0
    assert threads.between_steps() == 1 and len(calls) == 6  # not due: nothing is timed
    under.clear()
    under[1] = 0.03  # now one thread is the slow count (another job left a core free)
    clock.now = 60.0
    assert threads.between_steps() == 2 == torch.get_num_threads()
    assert len(calls) == 12 and threads.changes == 1
    clock.now = 100.0
    assert threads.between_steps() == 2 and len(calls) == 12  # due again at 120 s
    clock.now = 120.0
    threads.between_steps()
    assert len(calls) == 18
    # A long run re-times every minute: only the first choice and the changes are news.
    levels = [(r.levelno, r.getMessage().split(",")[0]) for r in caplog.records]
    assert levels == [
        (logging.INFO, "torch threads: 1"),
        (logging.INFO, "torch threads timed again: 2"),
        (logging.DEBUG, "torch threads timed again: 2"),
    ]


def test_a_given_count_is_never_timed_again() -> None:
    clock = _Clock()
    threads = Threads(2, _never_built, cores=4, clock=clock)
    assert threads.start() == 2
    clock.now = 1e9
    assert threads.between_steps() == 2 == torch.get_num_threads()


def _model_and_split() -> tuple[TransformerClassifier, Split]:
    torch.manual_seed(0)
    model = cast(
        TransformerClassifier,
        build_model("transformer", {"vocab_size": 50, "num_classes": 2, "max_len": 16, "dropout": 0.1}),
    )
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 17, size=40)
    ids = np.where(np.arange(16) < lengths[:, None], rng.integers(4, 50, size=(40, 16)), 0).astype(np.int32)
    return model, Split(ids, lengths, rng.integers(0, 2, size=40))


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_the_probe_changes_neither_the_model_nor_the_random_stream(mode: str) -> None:
    model, split = _model_and_split()
    model.train(mode == "train")
    for p in model.parameters():  # a step's gradients, as between two training steps
        p.grad = torch.ones_like(p)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = torch.get_rng_state()
    Threads(0, lambda: training_probe(model, split, TrainConfig(batch_size=8)), cores=2).start()
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert model.training == (mode == "train")


def test_the_probe_takes_one_micro_batch_of_median_rows() -> None:
    model, split = _model_and_split()
    seen: list[tuple[int, ...]] = []
    hook = model.embed.register_forward_pre_hook(lambda _, args: seen.append(tuple(args[0].shape)))
    median = int(np.sort(split.lengths)[len(split) // 2])
    training_probe(model, split, TrainConfig(batch_size=8, max_batch_tokens=3 * median))()
    training_probe(model, split, TrainConfig(batch_size=8, max_batch_tokens=0))()
    hook.remove()
    assert seen[0][0] == 3 and seen[1][0] == 8  # rows: what one micro-batch holds, else a batch
    assert seen[0][1] <= median + 1
