"""Server memory: RSS at idle, after N single-text calls, and over a soak at 70% of capacity;
growth is the least-squares slope over the soak's second half, when the arenas and caches have
had the first half to reach their working size."""

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


class Sampler(threading.Thread):
    """Samples a process tree's RSS every `every` seconds, labelled with the current phase."""

    def __init__(self, pid: int, every: float) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.pid, self.every, self.phase = pid, every, "idle"
        self.samples: list[RssSample] = []
        self._done, self._began = threading.Event(), time.monotonic()

    def run(self) -> None:
        while not self._done.is_set():
            self.sample()
            self._done.wait(self.every)

    def sample(self) -> float:
        rss = rss_bytes(self.pid) / MB
        self.samples.append(RssSample(self.phase, time.monotonic() - self._began, rss))
        return rss

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self.join(10)


def slope_mb_per_min(samples: Sequence[RssSample]) -> float:
    second_half = samples[len(samples) // 2 :]
    minutes = np.asarray([s.seconds for s in second_half]) / 60.0
    if len(samples) < 3 or np.ptp(minutes) == 0:
        return math.nan
    return float(np.polyfit(minutes, [s.rss_mb for s in second_half], 1)[0])


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
        memory.capacity, memory.soak_rate = capacity.rps, SOAK_SHARE * capacity.rps
        sampler.phase = "soak"
        memory.soak_start_mb = sampler.sample()
        soak = run_open(server.target, single, memory.soak_rate, plan.soak_seconds, warmup=0.0)
        memory.soak_end_mb = sampler.sample()
        memory.soak_error_share, memory.soak_errors = soak.error_share, dict(soak.errors)
    memory.samples = list(sampler.samples)
    memory.slope_mb_per_min = slope_mb_per_min([s for s in memory.samples if s.phase == "soak"])
    return memory
