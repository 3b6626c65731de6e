"""onnxruntime sessions: execution providers for --device and the session options."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

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


@dataclass(frozen=True)
class RuntimeSession:
    session: ort.InferenceSession
    provider: str  # the provider that runs the graph's nodes first in line


def session_options(settings: Settings) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = settings.intra_op_threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = _GRAPH_LEVELS[settings.graph_optimization]
    options.enable_cpu_mem_arena = settings.cpu_arena
    options.log_severity_level = 3  # errors only: onnxruntime's warnings are about graph internals
    options.add_session_config_entry(
        "session.intra_op.allow_spinning", "1" if settings.allow_spinning else "0"
    )
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
        str(model_path), sess_options=session_options(settings), providers=providers
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
    return RuntimeSession(session=session, provider=provider)
