"""Latency of the PyTorch model and of its ONNX graph in onnxruntime, measured side by side.

Both run the same random batch with the same number of threads; the figure that matters is
the ratio, because absolute times depend on the machine and on what else it is doing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from attnserve.export.contract import vocab_size as model_vocab_size
from attnserve.export.parity import cpu_session, random_batch, run_onnx, run_torch, torch_threads
from attnserve.training.models.base import Classifier

DEFAULT_BATCH_SIZES = (1, 32)
DEFAULT_LENGTH = 32


@dataclass(frozen=True)
class Latency:
    batch: int
    length: int
    torch_ms: float
    onnx_ms: float

    @property
    def speedup(self) -> float:
        """How many times faster onnxruntime is than PyTorch eager (> 1: onnxruntime wins)."""
        return self.torch_ms / self.onnx_ms


def median_ms(
    call: Callable[[], object],
    *,
    budget_s: float,
    min_runs: int = 5,
    max_runs: int = 500,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Median time of ``call`` in milliseconds, after warm-up, within about ``budget_s`` of wall time.

    ``clock=time.thread_time`` counts only the CPU time of the calling thread: for work that
    runs on that one thread it is immune to the process being descheduled on a busy machine.
    """
    for _ in range(3):
        call()
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(times) < min_runs or (len(times) < max_runs and time.perf_counter() < deadline):
        start = clock()
        call()
        times.append(clock() - start)
    return float(np.median(times)) * 1e3


def measure_latency(
    model: Classifier,
    graph: Path,
    *,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    length: int = DEFAULT_LENGTH,
    threads: int = 1,
    budget_s: float = 0.5,
) -> list[Latency]:
    """Torch eager vs onnxruntime (CPU) on full-length rows; ``length`` is capped at max_len."""
    model = model.cpu().eval()
    length = min(length, int(model.config.max_len))
    session = cpu_session(graph, threads=threads)
    rng = np.random.default_rng(0)
    results = []
    for batch in batch_sizes:
        ids, mask = random_batch(
            rng,
            batch,
            length,
            vocab_size=model_vocab_size(model),
            pad_id=int(model.config.pad_id),
            pad_share=0.0,
        )
        with torch_threads(threads):
            torch_ms = median_ms(partial(run_torch, model, ids, mask, None), budget_s=budget_s)
        onnx_ms = median_ms(partial(run_onnx, session, ids, mask), budget_s=budget_s)
        results.append(Latency(batch=batch, length=length, torch_ms=torch_ms, onnx_ms=onnx_ms))
    return results
