"""Trace a classifier to ONNX with symbolic batch and sequence dims, then prove the graph sound.

Two exporters are supported: the TorchScript tracer (``torch.onnx.export(dynamo=False)``)
and the ``torch.export``-based one (``dynamo=True``). docs/export.md records which one is the
default and why. Either way the saved graph is checked here, never trusted: full
``onnx.checker`` pass, strict shape inference, and every declared dim compared with the
graph's (a fixed number where a symbolic dim belongs is the classic exporter failure).
Before that, the shape arithmetic both exporters write around head splits is folded into
constant shapes (export/shapes.py).
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, get_args

import onnx
import torch
from torch import Tensor, nn

from attnserve.export.contract import (
    ATTENTION_MASK,
    BATCH,
    INPUT_IDS,
    SEQUENCE,
    GraphContract,
    example_inputs,
)
from attnserve.export.errors import ExportError, ExportRequestError
from attnserve.export.shapes import fold_shapes
from attnserve.service.bundle import AttentionKind, Dim, TensorSpec
from attnserve.training.models.base import Classifier

Exporter = Literal["torchscript", "dynamo"]
EXPORTERS: tuple[Exporter, ...] = get_args(Exporter)
DEFAULT_EXPORTER: Exporter = "torchscript"
DEFAULT_OPSET = 18
# The TorchScript exporter stops at opset 20; the dynamo exporter starts at 18.
OPSET_RANGE: dict[Exporter, tuple[int, int]] = {"torchscript": (17, 20), "dynamo": (18, 23)}

_ONNX_DTYPES: dict[int, str] = {int(onnx.TensorProto.INT64): "int64", int(onnx.TensorProto.FLOAT): "float32"}


class _Traceable(nn.Module):
    """Returns only tensors: exporters cannot name a ``None`` output (the no-attention family)."""

    def __init__(self, model: Classifier) -> None:
        super().__init__()
        self.model = model
        self.has_attention = model.attention_kind != AttentionKind.NONE

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, ...]:
        logits, attention = self.model(input_ids, attention_mask)
        if self.has_attention:
            if attention is None:
                raise ExportError(f"{self.model.family} declares attention but returned none")
            return logits, attention
        return (logits,)


def check_opset(exporter: Exporter, opset: int) -> None:
    low, high = OPSET_RANGE[exporter]
    if not low <= opset <= high:
        raise ExportRequestError(
            f"opset {opset} is not supported by the {exporter} exporter (use {low}..{high})"
        )


def export_model(
    model: Classifier, path: Path, contract: GraphContract, *, opset: int, exporter: Exporter
) -> None:
    """Write ``model`` (eval mode, on CPU) to ``path`` as a single self-contained ONNX file."""
    check_opset(exporter, opset)
    model = model.cpu().eval()
    traceable = _Traceable(model).eval()
    args = example_inputs(model, int(model.config.max_len))
    input_names = [spec.name for spec in contract.inputs]
    output_names = [spec.name for spec in contract.outputs]
    try:
        with _quiet(), torch.no_grad():
            if exporter == "dynamo":
                batch = torch.export.Dim(BATCH, min=1)
                sequence = torch.export.Dim(SEQUENCE, min=1, max=int(model.config.max_len))
                dims = {0: batch, 1: sequence}
                program = torch.onnx.export(
                    traceable,
                    args,
                    dynamo=True,
                    input_names=input_names,
                    output_names=output_names,
                    opset_version=opset,
                    dynamic_shapes={INPUT_IDS: dims, ATTENTION_MASK: dims},
                    external_data=False,
                    verbose=False,
                )
                if program is None:
                    raise ExportError("the dynamo exporter returned no program")
                program.save(str(path), external_data=False)
            else:
                axes = {
                    spec.name: {i: d for i, d in enumerate(spec.shape) if isinstance(d, str)}
                    for spec in [*contract.inputs, *contract.outputs]
                }
                torch.onnx.export(
                    traceable,
                    args,
                    str(path),
                    dynamo=False,
                    input_names=input_names,
                    output_names=output_names,
                    opset_version=opset,
                    dynamic_axes=axes,
                    do_constant_folding=True,
                )
                _pin_fixed_dims(path, contract)
            fold_shapes(path)
    except ExportError:
        raise
    except Exception as exc:  # exporters raise many unrelated types; keep the cause attached
        raise ExportError(
            f"{exporter} exporter failed for {model.family}: {type(exc).__name__}: {exc}"
        ) from exc


def _pin_fixed_dims(path: Path, contract: GraphContract) -> None:
    """Write the contract's fixed sizes where the TorchScript exporter could not infer one.

    Its shape inference gives up on some reshapes (Hugging Face encoders split heads with a
    computed shape) and names the output's dim after the node, e.g. ``Mulattention_dim_2``,
    although the size never varies. Only dims left unnamed by the contract are touched; a
    dim that is a wrong number still fails ``verify_graph``.
    """
    proto = onnx.load(str(path))
    symbolic = {d for spec in [*contract.inputs, *contract.outputs] for d in spec.shape if isinstance(d, str)}
    changed = False
    for value in proto.graph.output:
        spec = next((spec for spec in contract.outputs if spec.name == value.name), None)
        dims = value.type.tensor_type.shape.dim
        if spec is None or len(dims) != len(spec.shape):
            continue
        for dim, want in zip(dims, spec.shape, strict=True):
            if isinstance(want, int) and dim.HasField("dim_param") and dim.dim_param not in symbolic:
                dim.dim_value = want
                changed = True
    if changed:
        onnx.save(proto, str(path))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the exporters' progress prints and deprecation chatter; errors still raise."""
    loggers = [
        logging.getLogger(name)
        for name in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript", "onnx_ir")
    ]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def verify_graph(path: Path, contract: GraphContract, *, standard_ops_only: bool = True) -> onnx.ModelProto:
    """Checker, strict shape inference and the declared I/O, or ExportError naming the mismatch.

    ``standard_ops_only=False`` is for graphs onnxruntime rewrote with its own fused
    operators (com.microsoft domain), which the checker's full mode cannot type.
    """
    try:
        onnx.checker.check_model(str(path), full_check=standard_ops_only)
        proto = onnx.load(str(path))
        if standard_ops_only:
            proto = onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ExportError(f"{path.name} failed the ONNX checker: {exc}") from exc
    opset = graph_opset(proto)
    if opset < OPSET_RANGE["torchscript"][0]:
        raise ExportError(
            f"{path.name} uses opset {opset}; bundles need opset >= {OPSET_RANGE['torchscript'][0]}"
        )
    _compare("input", contract.inputs, list(proto.graph.input), exact=True)
    _compare("output", contract.outputs, list(proto.graph.output), exact=True)
    return proto


def graph_opset(proto: onnx.ModelProto) -> int:
    for entry in proto.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    raise ExportError("graph imports no default-domain opset")


def _compare(
    kind: str, declared: list[TensorSpec], actual: list[onnx.ValueInfoProto], *, exact: bool
) -> None:
    names = [value.name for value in actual]
    expected = [spec.name for spec in declared]
    if exact and names != expected:
        raise ExportError(f"graph {kind}s are {names}, expected {expected}")
    found = {value.name: value for value in actual}
    for spec in declared:
        if spec.name not in found:
            raise ExportError(f"graph has no {kind} {spec.name!r}")
        tensor = found[spec.name].type.tensor_type
        dtype = _ONNX_DTYPES.get(int(tensor.elem_type), onnx.TensorProto.DataType.Name(tensor.elem_type))
        if dtype != spec.dtype:
            raise ExportError(f"{kind} {spec.name!r} is {dtype}, expected {spec.dtype}")
        dims: list[Dim] = [
            d.dim_param if d.HasField("dim_param") else int(d.dim_value) for d in tensor.shape.dim
        ]
        if len(dims) != len(spec.shape):
            raise ExportError(f"{kind} {spec.name!r} has shape {dims}, expected {spec.shape}")
        for axis, (want, have) in enumerate(zip(spec.shape, dims, strict=True)):
            if isinstance(want, str) and not isinstance(have, str):
                raise ExportError(
                    f"{kind} {spec.name!r} axis {axis} is fixed at {have} in the graph, expected symbolic "
                    f"{want!r}: the exporter baked the example's size into the graph"
                )
            if want != have:
                raise ExportError(f"{kind} {spec.name!r} axis {axis} is {have!r}, expected {want!r}")
