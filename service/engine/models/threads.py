"""A model version's onnxruntime intra-op threads, chosen once at load.

Precedence: the server's setting (`--model-threads NAME=N`, then `--intra-op-threads N`) >
the bundle's hint (`bundle.json` `serving.intra_op_threads`, at most this worker's cores) > a
measurement. A small model spends its time in the front end and wants one thread, leaving the
other cores to the event loop; a pretrained encoder spends milliseconds a batch inside
onnxruntime and runs about twice as fast on two. The measurement tells the two apart: a
representative batch at one thread and at every core this process may use, each on a session
of its own that is let go at once.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import onnxruntime as ort

from attnserve.service.bundle import BundleManifest
from attnserve.service.engine.models.runtime import CPU, CUDA, session_options
from attnserve.service.settings import Settings

Source = Literal["measured", "server", "bundle"]

# Below this a batch is dominated by the front end: a thread pool's wake-ups cost what they save.
MIN_COMPUTE_MS = 2.0
# A smaller gain does not pay for the cores taken from the event loop and the other models.
MIN_SPEEDUP = 1.25
# The measured batch: a few rows of a typical short text, every token real.
BATCH_ROWS = 8
BATCH_TOKENS = 32
TIMED_RUNS = 5  # per thread count, in turns, after one warm-up run each
# A busy neighbour on one core slows the all-core runs far more than the one-thread runs and
# hides their gain (MiniLM int8 on a 2-core VM: 1.24-1.85x from one measurement to the next), so
# a compute-bound batch that falls short is measured again, and its best showing counts.
MEASUREMENTS = 3
# Where the CPU controller's files are: the container's own cgroup inside a container.
CGROUP = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class ThreadChoice:
    """The intra-op threads of a version's session and where the number came from."""

    intra_op: int  # 0: onnxruntime's own default (one per core)
    source: Source
    one_thread_ms: float | None  # the measured batch at 1 thread (None unless measured)
    all_cores_ms: float | None  # ... and at `cores` threads
    cores: int  # cores this process may use: its CPU affinity over the server's workers
    # Idle intra-op threads spin rather than sleep: a compute-bound model's lone text then skips
    # the wake-up of its second thread (MiniLM int8 on 2 cores: 6.1 -> 4.2 ms a text).
    spinning: bool = False

    def describe(self) -> str:
        threads = "onnxruntime's default threads" if self.intra_op == 0 else _plural(self.intra_op)
        if self.spinning:
            threads += ", spinning"
        if self.source == "server":
            return f"{threads} (server setting)"
        if self.source == "bundle":
            return f"{threads} (bundle hint)"
        if self.one_thread_ms is None or self.all_cores_ms is None:
            return f"{threads} (one core available: nothing to measure)"
        return (
            f"{threads} (measured: {self.one_thread_ms:.2f} ms at 1 thread, "
            f"{self.all_cores_ms:.2f} ms at {self.cores})"
        )


def _plural(threads: int) -> str:
    return "1 thread" if threads == 1 else f"{threads} threads"


def available_cores(workers: int, cgroup: Path = CGROUP) -> int:
    """CPU cores this process may run on (its affinity, within a cgroup CPU quota), shared out
    among the server's worker processes."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity API off Linux
        cores = os.cpu_count() or 1
    quota = quota_cores(cgroup)
    if quota is not None:
        cores = min(cores, quota)
    return max(1, cores // max(1, workers))


def quota_cores(cgroup: Path = CGROUP) -> int | None:
    """The cgroup CPU quota in whole cores (rounded up), or None where there is none.

    A container limited to `cpus: 2` still sees every core of its host in its affinity; its
    quota lives in cgroup v2's `cpu.max` ("200000 100000"; "max 100000" for none) or cgroup
    v1's `cpu.cfs_quota_us` / `cpu.cfs_period_us` (quota -1 for none)."""
    v2 = _read(cgroup / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        return _cores(quota, period)
    for folder in (cgroup / "cpu", cgroup / "cpu,cpuacct", cgroup):
        quota_us = _read(folder / "cpu.cfs_quota_us")
        if quota_us is not None:
            return _cores(quota_us, _read(folder / "cpu.cfs_period_us") or "")
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cores(quota: str, period: str) -> int | None:
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:  # "max": no quota
        return None
    if quota_us <= 0 or period_us <= 0:  # -1: no quota
        return None
    return max(1, math.ceil(quota_us / period_us))


def decide(one_ms: float, all_ms: float, cores: int) -> int:
    """`cores` threads when the batch is compute-bound and they speed it up enough, else 1."""
    if cores <= 1:
        return 1
    compute_bound = one_ms >= MIN_COMPUTE_MS
    faster = one_ms >= MIN_SPEEDUP * all_ms
    return cores if compute_bound and faster else 1


def configured(settings: Settings, manifest: BundleManifest, cores: int) -> ThreadChoice | None:
    """The choice the server's settings or the bundle make, or None: measure."""
    threads = settings.model_threads.get(manifest.name, settings.intra_op_threads)
    if threads is not None:
        return ThreadChoice(threads, "server", None, None, cores, bool(settings.allow_spinning))
    hint = manifest.serving.intra_op_threads if manifest.serving is not None else None
    if hint is not None:
        # Written for a whole machine: each of --workers N processes has only its share of it.
        return ThreadChoice(min(hint, cores), "bundle", None, None, cores, bool(settings.allow_spinning))
    if settings.device != "cpu" and CUDA in ort.get_available_providers():
        # The graph runs on the GPU: the CPU threads only feed it, and one is enough.
        return ThreadChoice(1, "server", None, None, cores)
    return None


def member_settings(settings: Settings, cascade: str, member: str, member_name: str) -> Settings:
    """The settings a cascade member loads with: `--model-threads CASCADE.member=N`, else
    `CASCADE=N`, given to the member under its own name (`<cascade>.student` as exported)."""
    threads = settings.model_threads
    count = threads.get(f"{cascade}.{member}", threads.get(cascade))
    if count is None:
        return settings
    return settings.model_copy(update={"model_threads": {**threads, member_name: count}})


def choose_threads(model_path: Path, settings: Settings, manifest: BundleManifest) -> ThreadChoice:
    """The version's intra-op threads: configured, or measured on `model_path` (blocking)."""
    cores = available_cores(settings.workers)
    chosen = configured(settings, manifest, cores)
    if chosen is not None:
        return chosen
    if cores == 1:
        return ThreadChoice(1, "measured", None, None, cores)
    ids = np.ones((BATCH_ROWS, min(manifest.max_len, BATCH_TOKENS)), dtype=np.int64)  # [B, T]
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    one_ms, all_ms = measure_ms(model_path, settings, (1, cores), feed)
    for _ in range(MEASUREMENTS - 1):
        if one_ms < MIN_COMPUTE_MS or decide(one_ms, all_ms, cores) > 1:
            break
        again_one, again_all = measure_ms(model_path, settings, (1, cores), feed)
        if again_one / again_all > one_ms / all_ms:
            one_ms, all_ms = again_one, again_all
    threads = decide(one_ms, all_ms, cores)
    # Unset --allow-spinning: spin when the model's own compute takes every core anyway (a
    # version sharing the process with another loads with it off: repository.py).
    spinning = threads > 1 if settings.allow_spinning is None else settings.allow_spinning
    return ThreadChoice(threads, "measured", one_ms, all_ms, cores, spinning)


def measure_ms(
    model_path: Path, settings: Settings, threads: tuple[int, int], feed: dict[str, np.ndarray]
) -> tuple[float, float]:
    """Milliseconds of `feed` through a CPU session at each of two intra-op thread counts.

    The sessions take the serving options (graph level, arena; inter-op 1 and sequential) but
    never spin, so that neither steals the core the other's runs are timed on. Their runs take
    turns and the quickest of each counts: a busy neighbour (another model loading, a load
    test) slows both alike, and only ever adds time.
    """
    sessions = [
        ort.InferenceSession(
            str(model_path), sess_options=session_options(settings, count, False), providers=[CPU]
        )
        for count in threads
    ]
    best = [float("inf")] * len(sessions)
    for session in sessions:
        session.run(["logits"], feed)  # the first run plans and allocates
    for _ in range(TIMED_RUNS):
        for index, session in enumerate(sessions):
            start = time.perf_counter()
            session.run(["logits"], feed)
            best[index] = min(best[index], time.perf_counter() - start)
    return best[0] * 1000.0, best[1] * 1000.0
