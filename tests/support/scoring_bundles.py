"""Multi-label and regression bundles for client tests, made from the shipped car-order bundle
(a trained transformer, labels negative and positive) without training anything.

Multi-label: the same files with `scoring` written into bundle.json (its `files` digests cover
model.onnx and tokenizer.json, not bundle.json). Regression: model.onnx's `logits` cut to its
first column by a Slice node, so the graph has one output; bundle.json then names one label,
declares [batch, 1] logits, keeps each golden case's first logit and the new graph's digest.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from attnserve.service.bundle import MANIFEST_FILE, sha256_file
from tests.support.shipped import SHIPPED

MULTI = "multi"  # the model names these bundles are served under
REGRESSION = "regression"
VALUE_LABEL = "score"  # the regression model's one label


def edit_manifest(bundle_dir: Path, **changes: Any) -> None:
    path = bundle_dir / MANIFEST_FILE
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def manifest_of(bundle_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((bundle_dir / MANIFEST_FILE).read_text())
    return data


def multi_label_bundle(repository: Path, thresholds: list[float], name: str = MULTI) -> Path:
    """repository/name/1: car-order served as a multi-label model with these thresholds."""
    target = repository / name / "1"
    shutil.copytree(SHIPPED / "1", target)
    scoring = {
        "problem": "multi_label_classification",
        "thresholds": thresholds,
        "chosen": {"method": "default"},
    }
    edit_manifest(target, name=name, scoring=scoring)
    return target


def _one_output(path: Path) -> None:
    """Rewrite model.onnx so that `logits` is the old logits' first column, [batch, 1]."""
    model = onnx.load(str(path))
    graph = model.graph
    for node in graph.node:
        node.output[:] = ["logits_all" if name == "logits" else name for name in node.output]
        node.input[:] = ["logits_all" if name == "logits" else name for name in node.input]
    for name, value in (("slice_start", 0), ("slice_end", 1), ("slice_axis", 1)):
        graph.initializer.append(numpy_helper.from_array(np.asarray([value], np.int64), name))
    graph.node.append(
        helper.make_node("Slice", ["logits_all", "slice_start", "slice_end", "slice_axis"], ["logits"])
    )
    logits = next(output for output in graph.output if output.name == "logits")
    logits.type.tensor_type.shape.dim[1].ClearField("dim_param")
    logits.type.tensor_type.shape.dim[1].dim_value = 1
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def regression_bundle(repository: Path, name: str = REGRESSION) -> Path:
    """repository/name/1: car-order's first logit served as a regression model's value."""
    target = repository / name / "1"
    shutil.copytree(SHIPPED / "1", target)
    _one_output(target / "model.onnx")
    data = manifest_of(target)
    outputs = [
        {**spec, "shape": ["batch", 1]} if spec["name"] == "logits" else spec for spec in data["outputs"]
    ]
    golden = [{**case, "logits": case["logits"][:1]} for case in data["golden"]]
    files = {**data["files"], "model.onnx": sha256_file(target / "model.onnx")}
    edit_manifest(
        target,
        name=name,
        labels=[VALUE_LABEL],
        outputs=outputs,
        golden=golden,
        files=files,
        data_profile=None,  # its label shares name the two labels
        scoring={"problem": "regression"},
    )
    return target


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-logits.astype(np.float64))), np.float32)


def golden_texts(bundle_dir: Path) -> list[str]:
    return [case["text"] for case in manifest_of(bundle_dir)["golden"]]
