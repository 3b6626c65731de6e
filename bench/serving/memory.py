"""Server memory: RSS at idle, after N single-text calls, and over a soak at 70% of capacity.

Growth is the least-squares slope of RSS over the soak's second half, after the arenas and
caches have had the first half to reach their working size.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.serving.plan import Plan
from bench.serving.results import Memory, RssSample
from bench.serving.texts import prepared
from kit.launch import attnserve, rss_bytes
from kit.load import run_closed, run_open

SOAK_SHARE = 0.7
MB = 1024 * 1024


class Sampler:
    """Samples a process tree's RSS in a thread, labelled with the current phase."""

    def __init__(self, pid: int, every: float) -> None:
        self.pid = pid
        self.every = every
        self.phase = "idle"
        self.samples: list[RssSample] = []
        self._stop = threading.Event()
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.every)

    def sample(self) -> float:
        rss = rss_bytes(self.pid) / MB
        self.samples.append(RssSample(self.phase, time.monotonic() - self._start, rss))
        return rss

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)


def slope_mb_per_min(samples: Sequence[RssSample]) -> float:
    if len(samples) < 3:
        return math.nan
    second_half = samples[len(samples) // 2 :]
    minutes = np.asarray([s.seconds for s in second_half]) / 60.0
    rss = np.asarray([s.rss_mb for s in second_half])
    if np.ptp(minutes) == 0:
        return math.nan
    return float(np.polyfit(minutes, rss, 1)[0])


def measure(repository: Path, model: str, texts: Sequence[str], plan: Plan) -> Memory:
    memory = Memory(requests=plan.memory_requests, soak_seconds=plan.soak_seconds)
    single = prepared("native", model, texts, 1, False)
    with attnserve(repository) as server, Sampler(server.pid, plan.rss_every) as sampler:
        time.sleep(max(2 * plan.rss_every, 0.5))
        memory.idle_mb = sampler.sample()
        sampler.phase = "requests"
        done = run_closed(server.target, single, 16, 3600.0, warmup=0.0, calls=plan.memory_requests)
        if done.calls < plan.memory_requests:
            raise RuntimeError(f"only {done.calls} of {plan.memory_requests} calls were made within the hour")
        memory.after_requests_mb = sampler.sample()
        sampler.phase = "capacity"
        capacity = run_closed(server.target, single, 64, max(plan.seconds, 1.0), warmup=plan.warmup)
        if capacity.rps <= 0:
            raise RuntimeError(f"no call succeeded while measuring capacity: {dict(capacity.errors)}")
        memory.capacity = capacity.rps
        memory.soak_rate = SOAK_SHARE * capacity.rps
        sampler.phase = "soak"
        memory.soak_start_mb = sampler.sample()
        soak = run_open(server.target, single, memory.soak_rate, plan.soak_seconds, warmup=0.0)
        memory.soak_end_mb = sampler.sample()
        memory.soak_error_share = soak.error_share
        memory.soak_errors = dict(soak.errors)
    memory.samples = list(sampler.samples)
    memory.slope_mb_per_min = slope_mb_per_min([s for s in memory.samples if s.phase == "soak"])
    return memory
