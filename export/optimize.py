"""``--optimize``: store the graph onnxruntime builds at ORT_ENABLE_EXTENDED, saved offline.

Extended optimizations fuse nodes into onnxruntime's own operators (com.microsoft domain:
FusedMatMul, BiasGelu, SkipLayerNormalization, ...), so the stored graph loads only in
onnxruntime, and it was optimized for the CPU execution provider. Layout optimizations
(ORT_ENABLE_ALL) are left out on purpose: they are specific to the machine that ran them.
"""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort

from attnserve.export.errors import ExportError
from attnserve.export.parity import PROVIDER

LEVEL = "ORT_ENABLE_EXTENDED"


def optimize_graph(source: Path, target: Path) -> None:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(target)
    try:
        ort.InferenceSession(str(source), options, providers=[PROVIDER])
    except Exception as exc:  # onnxruntime raises its own untyped exceptions
        raise ExportError(f"onnxruntime could not optimize {source.name}: {exc}") from exc
    if not target.is_file() or target.stat().st_size == 0:
        raise ExportError(f"onnxruntime wrote no optimized graph to {target}")
