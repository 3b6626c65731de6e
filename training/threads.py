"""How many CPU threads torch trains with: a fixed count, or one chosen by timing a probe.

A second thread is not always a gain. Measured on a 2-core machine (docs/training.md): the
default transformer at 256 tokens trained 1.7 times as fast with 2 threads as with 1 when the
machine was quiet, and at 0.2 times the speed of 1 thread while another job ran, each thread
waiting for the other at every step. So with ``threads=0`` a training step on a copy of the
model (forward and backward over a batch of median-length rows, no optimizer step) is timed
under 1 thread and under every core the process may use, and the faster count is kept for
the session. The probe touches neither the model nor the random streams, so the run trains
as it would with that count given; the count can change the rounding of large reductions,
so a resumed run is bit-identical to an uninterrupted one only under the same count.
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Callable

import numpy as np
import torch

from attnserve.training.batching import Split, batch_tensors
from attnserve.training.models.base import Classifier
from attnserve.training.step import accumulate_gradients
from attnserve.training.train_config import TrainConfig

log = logging.getLogger(__name__)

TIMED_RUNS = 2  # per candidate, after one warm-up run (thread start-up, allocator)


def usable_cores() -> int:
    """Cores this process may run on (its affinity, which a container's cpuset narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


Probe = Callable[[], None]


def choose_threads(threads: int, make_probe: Callable[[], Probe], cores: int | None = None) -> int:
    """Set torch's thread count: ``threads`` when above 0, else the faster of 1 and ``cores``
    (default: every usable core) for the probe ``make_probe`` builds, only then (it copies the
    model); returns the count set."""
    cores = usable_cores() if cores is None else cores
    if threads > 0 or cores == 1:
        torch.set_num_threads(threads or 1)
        return threads or 1
    probe = make_probe()
    cost: dict[int, float] = {}
    with torch.random.fork_rng(devices=[]):
        for count in (1, cores):
            torch.set_num_threads(count)
            probe()
            runs = []
            for _ in range(TIMED_RUNS):
                started = time.perf_counter()
                probe()
                runs.append(time.perf_counter() - started)
            cost[count] = min(runs)
    chosen = min(cost, key=lambda count: cost[count])
    torch.set_num_threads(chosen)
    timings = ", ".join(f"{count}: {cost[count] * 1000:.1f} ms" for count in sorted(cost))
    log.info("torch threads: %d, the faster for one training step (%s)", chosen, timings)
    return chosen


def training_probe(model: Classifier, train: Split, cfg: TrainConfig) -> Probe:
    """Forward and backward of a copy of ``model`` over a batch of median-length rows, taken as
    the training step takes it (in micro-batches above ``cfg.max_batch_tokens``)."""
    probe = copy.deepcopy(model).train()
    order = np.argsort(train.lengths, kind="stable")
    middle = max(len(order) // 2 - cfg.batch_size // 2, 0)
    idx = order[middle : middle + cfg.batch_size]
    batch = batch_tensors(train, idx, next(probe.parameters()).device)

    def step() -> None:
        probe.zero_grad(set_to_none=True)
        accumulate_gradients(probe, batch, cfg)

    return step
