"""onnxruntime sessions: execution providers for --device, the session options, and the feed.

A session is fed right-padded int64 `input_ids` and `attention_mask` (`pad_ids`) and asked
for `logits`, and `attention` when the call wants it (`RuntimeSession.run`); the lifecycle's
warm-up and golden check pad their rows first; the request path's runner hands a batch's rows
over unpadded (`run_rows` pads them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from attnserve.service.engine.models.tokenization import TokenIds
from attnserve.service.settings import Settings

log = logging.getLogger(__name__)

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
_GRAPH_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


class DeviceError(RuntimeError):
    """The requested execution provider cannot be used (fatal at start-up)."""


# What a run fed rows unpadded returns: its outputs, and the input_ids and attention_mask
# it padded them to, int64 [B, T].
Fed = tuple[list[np.ndarray], np.ndarray, np.ndarray]

_LOGITS = ["logits"]
_LOGITS_AND_ATTENTION = ["logits", "attention"]
# A version whose document head reads the windows' vectors asks for them last.
_NAMES = {
    (False, False): _LOGITS,
    (True, False): _LOGITS_AND_ATTENTION,
    (False, True): ["logits", "vector"],
    (True, True): ["logits", "attention", "vector"],
}
# The CPU arena keeps every region it grew to, so one batch at the token budget with every
# layer's attention would hold its peak for the life of the process. Runs this large (B x T x T
# positions) hand back what they grew beyond the first region when they end; they take tens of
# milliseconds, against which the free and the next allocation are noise.
SHRINK_AT_POSITIONS = 1 << 20
_SHRINK = ort.RunOptions()
_SHRINK.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")


@dataclass(frozen=True)
class RuntimeSession:
    session: ort.InferenceSession
    provider: str  # the provider that runs the graph's nodes first in line
    shrinks: bool = False  # the CPU arena is on, so large runs can hand back what they grew

    def run(
        self, ids: np.ndarray, mask: np.ndarray, attention: bool, vector: bool = False
    ) -> list[np.ndarray]:
        """[logits [B, C]], with the attention output after it when `attention` is asked
        (only of a graph that has one), and the `vector` output [B, D] last when `vector` is."""
        names = _NAMES[attention, vector]
        batch, width = ids.shape  # [B, T]
        shrink = self.shrinks and batch * width * width >= SHRINK_AT_POSITIONS
        feed = {"input_ids": ids, "attention_mask": mask}
        outputs: list[np.ndarray] = self.session.run(names, feed, _SHRINK if shrink else None)
        # onnxruntime's arrays are views of the arena's chunks: a reply still being serialised (or
        # a call's row sliced out of a batch) would pin its chunk while the next batch runs, and
        # the arena would add a region, twice the last, each time (RSS grew by about 500 MB per
        # hostile round against the tiny BERT). Copies free every chunk as the run ends, at the
        # cost of one memcpy of the outputs (a few ms for 32 MB of attention, next to the run's
        # tens); logits alone cost microseconds.
        return list(map(np.array, outputs))

    def run_rows(
        self, rows: Sequence[TokenIds], pad_id: int, width: int, attention: bool, vector: bool = False
    ) -> Fed:
        """`run` on a batch's rows, right-padded here to `width` with `pad_id` (the request path's
        runner): the outputs, and the ids and mask fed [B, T] (the drift reads them)."""
        ids, mask = pad_ids(rows, pad_id, width)
        return self.run(ids, mask, attention, vector), ids, mask


def pad_ids(rows: Sequence[TokenIds], pad_id: int, width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad token id rows to `width` (the longest): (input_ids, attention_mask), int64 [B, T]."""
    if width is None:
        width = max(len(row) for row in rows)
    if len(rows) == 1 and len(rows[0]) == width:
        ids = np.asarray(rows, dtype=np.int64).reshape(1, width)
        return ids, np.ones_like(ids)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)  # [B, T]
    mask = np.zeros((len(rows), width), dtype=np.int64)  # [B, T]
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


def session_options(settings: Settings, intra_op_threads: int, spinning: bool) -> ort.SessionOptions:
    """The server's session options at `intra_op_threads` (models/threads.py chooses them per
    version; 0 = onnxruntime's default). One inter-op thread, sequential: a graph's nodes run
    one after another, each split over the intra-op threads."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = _GRAPH_LEVELS[settings.graph_optimization]
    options.enable_cpu_mem_arena = settings.cpu_arena
    options.log_severity_level = 3  # errors only: onnxruntime's warnings are about graph internals
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    # Spinning serves the gaps between a run's parallel sections. Left on after a run (about
    # 40 ms), it held a core at one call every few ms that the loop and batcher threads need.
    options.add_session_config_entry("session.force_spinning_stop", "1")
    return options


def check_device(settings: Settings) -> None:
    """Fail fast (DeviceError) when --device cuda cannot work in this installation."""
    available = ort.get_available_providers()
    log.info("onnxruntime %s, providers available: %s", ort.__version__, ", ".join(available))
    if settings.device == "cuda" and CUDA not in available:
        raise DeviceError(_no_cuda(available))


def _no_cuda(available: list[str]) -> str:
    return (
        f"--device cuda needs onnxruntime's {CUDA}, which this installation lacks "
        f"(available: {', '.join(available)}). Install attnserve[gpu] (onnxruntime-gpu) "
        "on a machine with an NVIDIA GPU, or use --device cpu / --device auto."
    )


def _providers(settings: Settings) -> list[str | tuple[str, dict[str, str]]]:
    cuda = (CUDA, {"device_id": str(settings.cuda_device_id)})
    return [cuda, CPU] if settings.device in ("cuda", "auto") else [CPU]


def create_session(
    model_path: Path,
    settings: Settings,
    on_cpu_fallback: Callable[[], None] | None = None,
    *,
    intra_op_threads: int,
    spinning: bool = False,
    label: str = "model",
) -> RuntimeSession:
    """Create a session on the device `settings.device` asks for.

    `cuda` raises DeviceError unless the graph really runs on CUDA (onnxruntime itself
    silently falls back to CPU when the CUDA libraries fail to load). `auto` accepts the
    CPU, logs a warning and calls `on_cpu_fallback`.
    """
    available = ort.get_available_providers()
    if settings.device == "cuda" and CUDA not in available:
        raise DeviceError(_no_cuda(available))
    providers = _providers(settings) if CUDA in available else [CPU]
    session = ort.InferenceSession(
        str(model_path),
        sess_options=session_options(settings, intra_op_threads, spinning),
        providers=providers,
    )
    provider = session.get_providers()[0]
    if settings.device == "cuda" and provider != CUDA:
        raise DeviceError(
            f"--device cuda: onnxruntime could not start {CUDA} (CUDA/cuDNN libraries missing or no GPU "
            f"visible) and would run on {provider}; fix the GPU setup or use --device auto"
        )
    if settings.device == "auto" and provider != CUDA:
        why = "no GPU could be initialised" if CUDA in available else f"this onnxruntime has no {CUDA}"
        log.warning("--device auto: %s; %s runs on %s (CPU fallback)", why, label, provider)
        if on_cpu_fallback is not None:
            on_cpu_fallback()
    return RuntimeSession(session=session, provider=provider, shrinks=provider == CPU and settings.cpu_arena)
