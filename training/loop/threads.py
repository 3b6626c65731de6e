"""How many CPU threads torch trains with: a fixed count, or the faster count for a timed
probe, timed again as the run goes.

A second thread is not always a gain. Measured on a 2-core machine (docs/results/reviews-findings.md): the
default transformer at 256 tokens trained 1.7 times as fast with 2 threads as with 1 when the
machine was quiet, and at 0.2 times the speed of 1 thread while another job ran, each thread
waiting at every step for the other, whose core the job had taken. So with ``threads=0`` one
training micro-batch of median-length rows (forward and backward, no optimizer step) is timed
under 1 thread and under every core the process may use, and the faster count is set. A
count chosen once cannot see a job that starts later (here: a run that takes 83 s on one
thread had not finished after 400 s on two once another job started), so the probe runs
again every ``RECHECK_SECONDS`` of training, between steps, and the count follows.

The probe runs on the model itself: it restores the model's buffers, train/eval mode and
the random streams and leaves no gradient behind, so the run trains as it would with that
count given. The count can change the rounding of large reductions, so a run is
bit-identical to another only under the same counts: a fixed count does that (two car-order
runs on 2 threads ended with the same weights, bit for bit). A fixed count above the usable
cores is lowered to them.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable

import numpy as np
import torch

from attnserve.training.loop.batching import Split, batch_tensors
from attnserve.training.loop.config import TrainConfig
from attnserve.training.loop.step import accumulate_gradients
from attnserve.training.models.base import Classifier

log = logging.getLogger(__name__)

TIMED_RUNS = 2  # per candidate, after one warm-up run (thread start-up, allocator)
# Six probe passes of one micro-batch each: about 0.3 s for the default transformer at 256
# tokens, 0.5% of a minute, while a job that takes a core is noticed within a minute.
RECHECK_SECONDS = 60.0

Probe = Callable[[], None]


def usable_cores() -> int:
    """Cores this process may run on (its affinity, which a container's cpuset narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class Threads:
    """torch's thread count for one run: ``threads`` when above 0, else the faster of 1 and
    ``cores`` (default: every usable core) for the probe ``make_probe`` builds (only when a
    count is to be timed), timed again by `between_steps` once ``recheck_seconds`` passed."""

    def __init__(
        self,
        threads: int,
        make_probe: Callable[[], Probe],
        cores: int | None = None,
        *,
        recheck_seconds: float = RECHECK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cores = usable_cores() if cores is None else cores
        self.auto = threads <= 0 and self.cores > 1
        # More threads than cores only makes each wait for a core another one holds.
        self.count = min(threads, self.cores) if threads > 0 else 1
        if self.count < threads:
            log.info("torch threads: %d, the usable cores (%d asked)", self.count, threads)
        self.changes = 0  # how often a re-timing moved the count
        self._make_probe = make_probe
        self._probe: Probe | None = None
        self._recheck, self._clock = recheck_seconds, clock
        self._due = math.inf

    def start(self) -> int:
        """Set the count (timing the probe if it is to be chosen); returns it."""
        if self.auto:
            self.count = self._timed(None)
        torch.set_num_threads(self.count)
        return self.count

    def between_steps(self) -> int:
        """Time the probe again when it is due, and set the faster count; returns the count."""
        if self.auto and self._clock() >= self._due:
            before = self.count
            self.count = self._timed(before)
            self.changes += self.count != before
        return self.count

    def _timed(self, before: int | None) -> int:
        """Time the probe under each candidate count and set the faster; logged at INFO when
        the count is first chosen or changes (a long run re-times every minute)."""
        probe = self._probe = self._probe or self._make_probe()
        cost: dict[int, float] = {}
        with torch.random.fork_rng(devices=[]):
            for count in (1, self.cores):
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
        self._due = self._clock() + self._recheck
        timings = ", ".join(f"{count}: {cost[count] * 1000:.1f} ms" for count in sorted(cost))
        level = logging.INFO if chosen != before else logging.DEBUG
        again = "" if before is None else " timed again"
        log.log(level, "torch threads%s: %d, the faster for one training step (%s)", again, chosen, timings)
        return chosen


def training_probe(model: Classifier, train: Split, cfg: TrainConfig) -> Probe:
    """Forward and backward of ``model`` over median-length rows of ``train``: as many as one
    micro-batch of the training step holds (``cfg.max_batch_tokens``), at most a batch.

    Each run leaves the model as it found it: buffers, train/eval mode, no gradients (the
    training step sets its own from none, so nothing of a step is lost between two steps)."""
    order = np.argsort(train.lengths, kind="stable")
    width = max(int(train.lengths[order[len(order) // 2]]), 1)
    rows = cfg.batch_size if cfg.max_batch_tokens <= 0 else cfg.max_batch_tokens // width
    rows = min(max(rows, 1), cfg.batch_size, len(order))
    middle = max(len(order) // 2 - rows // 2, 0)
    batch = batch_tensors(train, order[middle : middle + rows], next(model.parameters()).device)

    def step() -> None:
        training = model.training
        buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
        model.train()
        model.zero_grad(set_to_none=True)
        try:
            accumulate_gradients(model, batch, cfg)
        finally:
            model.zero_grad(set_to_none=True)
            model.train(training)
            with torch.no_grad():
                for name, b in model.named_buffers():
                    b.copy_(buffers[name])

    return step
