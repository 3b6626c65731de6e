"""A classifier graph's pooled vector as an extra output, `vector` [batch, H]: the input of the
final linear layer that turns it into `logits` [batch, C].

Found by walking back from `logits` through that layer in any of the forms exporters and
onnxruntime's dynamic quantization leave: Gemm; MatMul then Add; or the int8 form
(DynamicQuantizeLinear, MatMulInteger, Cast, Mul by the scales, then Add), with Identity
nodes passed through. The layer's weight [C, H] and bias [C] are read from the graph's own
initializers (dequantized for int8), and its nodes are kept as a graph of their own, so
`FinalLayer.logits` recomputes the graph's logits from its vectors with onnxruntime's own
kernels (an int8 product saturates on AVX2 CPUs without VNNI, which no exact sum reproduces):
the check every graph gains the output under. A graph whose logits do not come out of such a
layer is refused (`NoFinalLayer`), naming the node found instead.

A document head that reads vectors needs them (training/document/, export/document.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

VECTOR = "vector"
LOGITS = "logits"


class NoFinalLayer(ValueError):
    """The graph's logits do not come out of a linear layer over a float vector."""


@dataclass(frozen=True)
class FinalLayer:
    """logits = vector @ weight.T + bias, the vector dynamically quantized first where `int8`."""

    vector: str  # the graph's tensor that feeds the layer
    weight: np.ndarray  # [C, H] float32 (dequantized for int8)
    bias: np.ndarray  # [C] float32
    int8: bool = False
    graph: bytes = b""  # the layer's own nodes and constants: `vector` [B, H] in, `logits` out

    @property
    def size(self) -> int:
        return int(self.weight.shape[1])

    def logits(self, vectors: np.ndarray) -> np.ndarray:
        """[B, C] the layer's logits of a batch of vectors [B, H], as the graph computes them: its
        own nodes on onnxruntime (the int8 form quantizes the whole batch with one scale)."""
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(self.graph, options, providers=["CPUExecutionProvider"])
        (out,) = session.run([LOGITS], {VECTOR: np.asarray(vectors, np.float32)})
        return np.asarray(out, np.float32)


class _Graph:
    """The graph's producers and constants, by tensor name."""

    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        self.producer = {name: node for node in graph.node for name in node.output}
        self.constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
                self.constants[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)

    def node(self, name: str) -> onnx.NodeProto | None:
        node = self.producer.get(name)
        while node is not None and node.op_type == "Identity":
            node = self.producer.get(node.input[0])
        return node

    def split(self, node: onnx.NodeProto) -> tuple[str, np.ndarray] | None:
        """A binary node's (variable input, constant input), where exactly one is constant."""
        a, b = node.input[0], node.input[1]
        if (a in self.constants) == (b in self.constants):
            return None
        return (b, self.constants[a]) if a in self.constants else (a, self.constants[b])


def find_final_layer(model: onnx.ModelProto) -> FinalLayer:
    """The linear layer `logits` comes out of; NoFinalLayer where there is none."""
    g = _Graph(model)
    node = g.node(LOGITS)
    if node is None:
        raise NoFinalLayer("the graph has no node computing 'logits'")
    if node.op_type == "Gemm":
        return _alone(model, _gemm(g, node))
    bias: np.ndarray | None = None
    if node.op_type == "Add":
        parts = g.split(node)
        inner = g.node(parts[0]) if parts is not None else None
        if parts is None or inner is None:
            raise NoFinalLayer("'logits' comes out of an Add that is not a bias over a layer's product")
        bias, node = parts[1].astype(np.float32).reshape(-1), inner
    if node.op_type == "MatMul" and node.input[1] in g.constants:
        weight = g.constants[node.input[1]].astype(np.float32).T
        return _alone(model, _layer(node.input[0], weight, bias))
    if node.op_type == "Mul":
        return _alone(model, _int8(g, node, bias))
    raise NoFinalLayer(
        f"'logits' comes out of {node.op_type} ({node.name or 'unnamed'}), not a final linear layer "
        "(Gemm, MatMul and Add, or their dynamic int8 form)"
    )


def _layer(vector: str, weight: np.ndarray, bias: np.ndarray | None, *, int8: bool = False) -> FinalLayer:
    if weight.ndim != 2:
        raise NoFinalLayer(f"the final layer's weight has shape {list(weight.shape)}, not [C, H]")
    b = np.zeros(weight.shape[0], np.float32) if bias is None else np.broadcast_to(bias, weight.shape[:1])
    return FinalLayer(vector, weight, np.asarray(b, np.float32), int8)


def _alone(model: onnx.ModelProto, layer: FinalLayer) -> FinalLayer:
    """`layer` with its graph: the nodes `logits` needs, walked back to the vector."""
    inner, constants = model.graph.node, {init.name: init for init in model.graph.initializer}
    producer = {name: i for i, node in enumerate(inner) for name in node.output}
    picked: set[int] = set()
    needed, used = [LOGITS], set()
    while needed:
        name = needed.pop()
        if not name or name == layer.vector or name in constants:
            used.add(name)
            continue
        if name not in producer:
            raise NoFinalLayer(f"the final layer reads {name!r} besides its vector")
        if producer[name] not in picked:
            picked.add(producer[name])
            needed.extend(inner[producer[name]].input)
    nodes = [_reading(inner[i], layer.vector) for i in sorted(picked)]  # in the graph's order
    graph = helper.make_graph(
        nodes,
        "final_layer",
        [helper.make_tensor_value_info(VECTOR, onnx.TensorProto.FLOAT, ["batch", layer.size])],
        [helper.make_tensor_value_info(LOGITS, onnx.TensorProto.FLOAT, ["batch", len(layer.bias)])],
        [constants[name] for name in sorted(used & constants.keys())],
    )
    alone = helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    return replace(layer, graph=alone.SerializeToString())


def _reading(node: onnx.NodeProto, vector: str) -> onnx.NodeProto:
    """A copy of `node` whose inputs read `vector` under the layer graph's input name."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.input[:] = [VECTOR if name == vector else name for name in node.input]
    return copy


def _gemm(g: _Graph, node: onnx.NodeProto) -> FinalLayer:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if attrs.get("transA", 0) or node.input[1] not in g.constants:
        raise NoFinalLayer("'logits' comes out of a Gemm whose weight is not a constant")
    weight = g.constants[node.input[1]].astype(np.float32)
    weight = (weight if attrs.get("transB", 0) else weight.T) * np.float32(attrs.get("alpha", 1.0))
    bias = None
    if len(node.input) > 2 and node.input[2]:
        if node.input[2] not in g.constants:
            raise NoFinalLayer("'logits' comes out of a Gemm whose bias is not a constant")
        bias = g.constants[node.input[2]].astype(np.float32).reshape(-1) * np.float32(attrs.get("beta", 1.0))
    return _layer(node.input[0], weight, bias)


def _int8(g: _Graph, mul: onnx.NodeProto, bias: np.ndarray | None) -> FinalLayer:
    """Mul(Cast(MatMulInteger(DynamicQuantizeLinear(v), W_q, ...)), scale_v * scale_W)."""
    nodes = [g.node(name) for name in mul.input]
    cast = next((n for n in nodes if n is not None and n.op_type == "Cast"), None)
    scales = next((n for n in nodes if n is not None and n.op_type == "Mul"), None)
    product = g.node(cast.input[0]) if cast is not None else None
    if product is None or scales is None or product.op_type != "MatMulInteger":
        raise NoFinalLayer("'logits' comes out of a Mul that is not a dynamic int8 layer's rescaling")
    quantize = g.node(product.input[0])
    scale_parts = g.split(scales)
    if quantize is None or quantize.op_type != "DynamicQuantizeLinear" or scale_parts is None:
        raise NoFinalLayer("the int8 final layer's input is not a DynamicQuantizeLinear of a float vector")
    if product.input[1] not in g.constants:
        raise NoFinalLayer("the int8 final layer's weight is not a constant")
    weight_q = g.constants[product.input[1]].astype(np.float64)  # [H, C]
    zero = g.constants.get(product.input[3], np.zeros(1)) if len(product.input) > 3 else np.zeros(1)
    weight_int = (weight_q - zero.astype(np.float64)).T  # [C, H]
    scale = scale_parts[1].astype(np.float32).reshape(-1)
    weight = (weight_int * scale.reshape(-1, 1)).astype(np.float32)
    return _layer(quantize.input[0], weight, bias, int8=True)


def with_vector(model: onnx.ModelProto) -> tuple[onnx.ModelProto, FinalLayer]:
    """A copy of `model` that also outputs `vector` [batch, H], and the layer it found."""
    layer = find_final_layer(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    if any(o.name == VECTOR for o in out.graph.output):
        return out, layer  # already given
    # An Identity gives the output its own name: the inner tensor keeps its consumers as they are.
    out.graph.node.append(helper.make_node("Identity", [layer.vector], [VECTOR], name="vector_output"))
    out.graph.output.append(
        helper.make_tensor_value_info(VECTOR, onnx.TensorProto.FLOAT, ["batch", layer.size])
    )
    return out, layer


def check_vectors(layer: FinalLayer, logits: np.ndarray, vectors: np.ndarray, where: str) -> None:
    """NoFinalLayer unless the graph's logits are its vectors through the layer (one batch)."""
    again = layer.logits(vectors)
    scale = max(1.0, float(np.abs(logits).max()))
    worst = float(np.abs(again - logits).max())
    # float32 sums in another order; int8 rounds the odd activation to the other integer
    tolerance = (2e-3 if layer.int8 else 1e-4) * scale
    if vectors.shape[1] != layer.size or worst > tolerance:
        raise NoFinalLayer(
            f"{where}: the vector [{vectors.shape[1]}] through the final layer gives logits {worst:.2e} "
            f"away from the graph's (tolerance {tolerance:.1e}): the layer found is not the one the "
            "logits come from"
        )


def write_with_vector(source: Path, target: Path, rows: Sequence[Sequence[int]], pad_id: int) -> int:
    """Write `source`'s graph with the `vector` output to `target` and return the vector's size,
    checked on `rows` (token ids): the same logits as `source`'s, and its vectors through the
    final layer giving them; NoFinalLayer otherwise."""
    graph, layer = with_vector(onnx.load(str(source)))
    onnx.save(graph, str(target))
    ids = np.full((len(rows), max(len(row) for row in rows)), pad_id, np.int64)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = row, 1
    feed = {"input_ids": ids, "attention_mask": mask}
    (before,) = _session(source).run([LOGITS], feed)
    logits, vectors = _session(target).run([LOGITS, VECTOR], feed)
    worst = float(np.abs(logits - before).max())
    if worst > 1e-4 * max(1.0, float(np.abs(before).max())):
        raise NoFinalLayer(f"{target.name}: the graph with its vector output moves the logits by {worst:.2e}")
    check_vectors(layer, logits, vectors, target.name)
    return layer.size


def _session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
