"""Fold the shape arithmetic the exporters write around head splits into constant shapes.

``x.unflatten(-1, (heads, -1))`` and ``y.flatten(2)`` export as
``Reshape(x, Concat(Slice(Shape(x), 0, 2), [heads, -1]))``: four nodes that onnxruntime runs on
every call to say "keep the first two dims". ONNX's Reshape already means that by a 0
(``allowzero`` unset copies the input's dim at that index), so the chain becomes the constant
``[0, 0, heads, -1]`` and the Shape/Slice/Concat nodes go. On the car-order transformer that
is 32 of 121 nodes after onnxruntime's fusions, and about a fifth of a one-text run's CPU
(docs/results/peers.md). onnxscript's optimizer folds the constants first (the TorchScript
exporter computes the Slice bounds with Mod and Reshape nodes of constants); the rewrite is one
onnxscript pattern rule, checked to apply only where the result is the same for every input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxscript.optimizer
from onnxscript import ir
from onnxscript.rewriter import MatchResult, RewriteRuleClassBase, RewriteRuleSet, rewrite


def _ints(value: ir.Value | None) -> list[int] | None:
    """The 1-D int64 constant ``value`` holds, or None where it is not one."""
    if value is None or value.const_value is None:
        return None
    array = value.const_value.numpy()
    if array.dtype != np.int64 or array.ndim != 1:
        return None
    return [int(v) for v in array]


def _attr(node: ir.Node, name: str) -> int | None:
    return node.attributes[name].as_int() if name in node.attributes else None


class OwnPrefixReshape(RewriteRuleClassBase):
    """Reshape(x, Concat(Slice(Shape(x), [0], [k]), tail)) -> Reshape(x, [0] * k + tail)."""

    def pattern(self, op: Any, x: ir.Value, starts: ir.Value, ends: ir.Value, tail: ir.Value) -> Any:
        dims = op.Shape(x, _outputs=["dims"])
        prefix = op.Slice(dims, starts, ends, _allow_other_inputs=True, _outputs=["prefix"])
        return op.Reshape(x, op.Concat(prefix, tail, axis=0), _outputs=["out"])

    def check(self, op: Any, *args: Any, **bound: Any) -> MatchResult:
        """Only where the constant means the same for every input (the bound values by name)."""
        result = MatchResult()
        x, ends, tail = bound["x"], bound["ends"], bound["tail"]
        shape, cut, reshape = (bound[name].producer() for name in ("dims", "prefix", "out"))
        if shape is None or cut is None or reshape is None:
            return result.fail("the chain has no producers")
        if _attr(shape, "start") not in (None, 0) or _attr(shape, "end") is not None:
            return result.fail("Shape takes part of the dims")
        if _attr(reshape, "allowzero") not in (None, 0):
            return result.fail("allowzero: a 0 would mean an empty dim, not a copy")
        k, rank = _ints(ends), len(x.shape) if x.shape is not None else 0
        if _ints(bound["starts"]) != [0] or k is None or len(k) != 1 or not 0 < k[0] <= rank:
            return result.fail("not a known prefix of the input's dims")
        if any(_ints(v) not in ([0], [1]) for v in cut.inputs[3:]):  # axes [0] and steps [1] only
            return result.fail("axes or steps other than the plain prefix")
        if _ints(tail) is None:
            return result.fail("the rest of the shape is not a constant")
        return result

    def rewrite(self, op: Any, *args: Any, **bound: Any) -> Any:
        ends, tail = _ints(bound["ends"]), _ints(bound["tail"])
        assert ends is not None and tail is not None  # check() passed only constants
        dims = np.array([0] * ends[0] + tail, dtype=np.int64)
        return op.Reshape(bound["x"], op.Constant(value=ir.tensor(dims)))


RULES = RewriteRuleSet([OwnPrefixReshape.rule()])  # type: ignore[no-untyped-call]


def fold_shapes(path: Path) -> int:
    """Rewrite the graph at ``path`` in place; the number of nodes it lost."""
    proto = onnx.load(str(path))
    before = len(proto.graph.node)
    model = ir.serde.deserialize_model(proto)
    onnxscript.optimizer.optimize(model)
    rewrite(model, pattern_rewrite_rules=RULES)
    onnxscript.optimizer.remove_unused_nodes(model)
    folded = ir.serde.serialize_model(model)
    onnx.save(folded, str(path))
    return before - len(folded.graph.node)
