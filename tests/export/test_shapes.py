"""export/shapes.py: a head split's shape arithmetic becomes a constant shape, and only where that
constant means the same for every input; the graph's answers do not change."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from attnserve.export.shapes import fold_shapes

SHIPPED = Path(__file__).resolve().parents[2] / "models" / "car-order" / "1" / "model.onnx"


def _graph(path: Path, *, start: int = 0, allowzero: int = 0, shape_of: str = "x") -> Path:
    """y = Reshape(x, Concat(Slice(Shape(shape_of), [start], [2]), [2, -1])): x is [B, T, 8]."""
    consts = {"starts": [start], "ends": [2], "tail": [2, -1]}
    nodes = [
        helper.make_node("Shape", [shape_of], ["dims"]),
        helper.make_node("Slice", ["dims", "starts", "ends"], ["prefix"]),
        helper.make_node("Concat", ["prefix", "tail"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=allowzero),
    ]
    graph = helper.make_graph(
        nodes,
        "split",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", 8]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", "sequence", 8]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(v, dtype=np.int64), name) for name, v in consts.items()],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def _ops(path: Path) -> list[str]:
    return [node.op_type for node in onnx.load(str(path)).graph.node]


def _answers(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return [np.asarray(out) for out in session.run(None, {k: v for k, v in feeds.items() if k in names})]


@pytest.mark.parametrize("size", [(1, 1), (3, 5), (2, 64)])
def test_a_split_of_the_last_dim_becomes_a_constant_shape_with_the_same_answers(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    before = _graph(tmp_path / "before.onnx")
    after = shutil.copy(before, tmp_path / "after.onnx")
    assert fold_shapes(Path(after)) > 0
    assert "Shape" not in _ops(Path(after)) and "Concat" not in _ops(Path(after))
    reshape = next(n for n in onnx.load(str(after)).graph.node if n.op_type == "Reshape")
    (shape,) = (n for n in onnx.load(str(after)).graph.node if reshape.input[1] in n.output)
    assert numpy_helper.to_array(shape.attribute[0].t).tolist() == [0, 0, 2, -1]
    x = np.random.default_rng(0).normal(size=(*size, 8)).astype(np.float32)
    feeds = {"x": x, "z": x}
    (want,), (got,) = _answers(before, feeds), _answers(Path(after), feeds)
    assert got.shape == want.shape == (*size, 2, 4) and np.array_equal(got, want)


@pytest.mark.parametrize(
    "variant",
    [{"start": 1}, {"allowzero": 1}, {"shape_of": "z"}],
    ids=["not-a-prefix", "allowzero", "another-tensor"],
)
def test_a_chain_whose_constant_could_mean_something_else_is_kept(
    tmp_path: Path, variant: dict[str, object]
) -> None:
    path = _graph(tmp_path / "kept.onnx", **variant)  # type: ignore[arg-type]
    fold_shapes(path)
    assert "Shape" in _ops(path) and "Concat" in _ops(path)


def test_the_shipped_transformer_loses_its_shape_chains_and_keeps_its_answers(tmp_path: Path) -> None:
    folded = Path(shutil.copy(SHIPPED, tmp_path / "model.onnx"))
    assert fold_shapes(folded) > 0
    assert _ops(folded).count("Shape") < _ops(SHIPPED).count("Shape")
    rng = np.random.default_rng(1)
    for batch, length in [(1, 1), (1, 12), (4, 64)]:
        mask = np.ones((batch, length), dtype=np.int64)
        mask[0, (length + 1) // 2 :] = 0
        feeds = {"input_ids": rng.integers(1, 40, (batch, length)), "attention_mask": mask}
        for want, got in zip(_answers(SHIPPED, feeds), _answers(folded, feeds), strict=True):
            np.testing.assert_allclose(got, want, atol=1e-6)
