"""``--optimize``: store the graph onnxruntime builds at ORT_ENABLE_EXTENDED, saved offline.

Extended optimizations fuse nodes into onnxruntime's own operators (com.microsoft domain:
FusedMatMul, BiasGelu, SkipLayerNormalization, ...), so the stored graph loads only in
onnxruntime, and it was optimized for the CPU execution provider. Layout optimizations
(ORT_ENABLE_ALL) are left out on purpose: they are specific to the machine that ran them.

Pretrained encoders (BERT and its kin) first go through onnxruntime's transformer optimizer
(``onnxruntime.transformers.optimizer``, model type ``bert``), which knows their layer
patterns, with the fusions that would drop the attention output turned off: the fused
Attention / MultiHeadAttention operators compute softmax(QK^T) inside and give no
probabilities out, so the ``attention`` output would lose its producer (docs/export.md).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

from attnserve.export.errors import ExportError
from attnserve.export.parity import PROVIDER

LEVEL = "ORT_ENABLE_EXTENDED"
TRANSFORMER_MODEL_TYPE = "bert"
# Fusions that replace the attention probabilities with an operator that never outputs them.
DISABLED_FUSIONS = ("enable_attention", "use_multi_head_attention")


@dataclass(frozen=True)
class EncoderShape:
    """What the transformer optimizer needs to match a pretrained encoder's attention blocks."""

    heads: int
    hidden: int


def optimize_graph(source: Path, target: Path, encoder: EncoderShape | None = None) -> None:
    """Write the optimized form of ``source``; ``encoder`` adds the transformer fusions first."""
    if encoder is not None:
        fused = target.with_name(target.stem + ".fused.onnx")
        fuse_transformer(source, fused, encoder)
        source = fused
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(target)
    try:
        ort.InferenceSession(str(source), options, providers=[PROVIDER])
    except Exception as exc:  # onnxruntime raises its own untyped exceptions
        raise ExportError(f"onnxruntime could not optimize {source.name}: {exc}") from exc
    if not target.is_file() or target.stat().st_size == 0:
        raise ExportError(f"onnxruntime wrote no optimized graph to {target}")


def fuse_transformer(
    source: Path, target: Path, encoder: EncoderShape, disabled: Sequence[str] = DISABLED_FUSIONS
) -> dict[str, int]:
    """onnxruntime's BERT fusions but the ``disabled`` ones; returns the fused operator counts."""
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    options = FusionOptions(TRANSFORMER_MODEL_TYPE)
    for name in disabled:
        setattr(options, name, False)
    quiet = logging.getLogger("onnxruntime.transformers")  # it logs every fusion it tries
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        model = optimize_model(
            str(source),
            model_type=TRANSFORMER_MODEL_TYPE,
            num_heads=encoder.heads,
            hidden_size=encoder.hidden,
            optimization_options=options,
            opt_level=0,  # fusions only: the session pass after it does the rest
        )
        model.save_model_to_file(str(target))
    except Exception as exc:  # the optimizer raises assorted types; keep the cause attached
        raise ExportError(
            f"the transformer optimizer failed on {source.name}: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        quiet.setLevel(level)
    return {name: count for name, count in model.get_fused_operator_statistics().items() if count}
