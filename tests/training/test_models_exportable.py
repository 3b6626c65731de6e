"""Every family exports to ONNX with dynamic batch and sequence and matches PyTorch in onnxruntime.

Exports at batch 2 x length 5 and runs at other sizes (including a fully padded row), with both
the TorchScript-based exporter (``dynamo=False``) and the torch.export-based one (``dynamo=True``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

from attnserve.training.models import Classifier, build_model

VOCAB = 30
MAX_LEN = 16

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "mean_pool": ("mean_pool", {"d_model": 8, "positions": "learned"}),
    "attention_pool": ("attention_pool", {"d_model": 8}),
    "self_attention": ("self_attention", {"d_model": 8, "qk_dim": 4}),
    "transformer-pre-mean": ("transformer", {"n_layers": 2, "n_heads": 2, "d_model": 8}),
    "transformer-post-cls-sinusoidal-cosine": (
        "transformer",
        {
            "n_layers": 1,
            "n_heads": 2,
            "d_model": 8,
            "norm": "post",
            "pooling": "cls",
            "positions": "sinusoidal",
            "head": "cosine",
        },
    ),
    "transformer-attention-pool": (
        "transformer",
        {"n_layers": 1, "n_heads": 1, "d_model": 8, "pooling": "attention"},
    ),
    "bow_mlp": ("bow_mlp", {"hidden": 8, "features": "binary"}),
    "conv_attention": ("conv_attention", {"d_model": 8, "n_queries": 2, "conv_layers": 2, "kernel_size": 5}),
    "gru_attention": ("gru_attention", {"d_model": 8, "n_queries": 2}),
    "gru_attention-bigrams": ("gru_attention", {"d_model": 8, "n_queries": 2, "ngram_buckets": 16}),
    "mean_pool-bigrams": ("mean_pool", {"d_model": 8, "ngram_buckets": 16}),
}

# torch.export takes a few seconds per model: one case per family, the transformer one with
# every non-default option.
DYNAMO_CASES = [
    "mean_pool",
    "attention_pool",
    "self_attention",
    "transformer-post-cls-sinusoidal-cosine",
    "bow_mlp",
    "conv_attention",
    "mean_pool-bigrams",
]
# Not gru_attention: torch.export's GRU graph fixes the initial state's batch size (onnxruntime
# refuses other batches); the TorchScript exporter, attnserve-export's default, exports it.

INPUTS = ["input_ids", "attention_mask"]


def make(case: str) -> Classifier:
    family, extra = CASES[case]
    torch.manual_seed(0)
    return build_model(family, {"vocab_size": VOCAB, "max_len": MAX_LEN, **extra}).eval()


def output_names(model: Classifier) -> list[str]:
    return ["logits"] if model.attention_kind == "none" else ["logits", "attention"]


def example(lengths: list[int], width: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (len(lengths), width), generator=g)  # [B, T]
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()  # [B, T]
    return ids * mask, mask


def export_legacy(model: Classifier, path: Path) -> None:
    attention_axes = {
        "pool": {0: "batch", 1: "sequence"},
        "self": {0: "batch", 1: "sequence", 2: "sequence"},
        "layers": {0: "batch", 3: "sequence", 4: "sequence"},
    }
    dynamic_axes: dict[str, dict[int, str]] = {name: {0: "batch", 1: "sequence"} for name in INPUTS}
    dynamic_axes["logits"] = {0: "batch"}
    if model.attention_kind != "none":
        dynamic_axes["attention"] = attention_axes[model.attention_kind]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter is deprecated
        torch.onnx.export(
            model,
            example([5, 3], 5, seed=0),
            str(path),
            dynamo=False,
            input_names=INPUTS,
            output_names=output_names(model),
            dynamic_axes=dynamic_axes,
            opset_version=17,
        )


def export_dynamo(model: Classifier, path: Path) -> None:
    # Example sizes must be >= 2: torch.export specialises dimensions of size 0 and 1.
    batch = torch.export.Dim("batch")
    sequence = torch.export.Dim("sequence", max=MAX_LEN)
    program = torch.onnx.export(
        model,
        example([5, 3], 5, seed=0),
        dynamo=True,
        input_names=INPUTS,
        output_names=output_names(model),
        dynamic_shapes={name: {0: batch, 1: sequence} for name in INPUTS},
    )
    assert program is not None
    program.save(str(path))


# Known, harmless export noise: the TorchScript tracer flags the Python-side length check (it runs
# on the example inputs and leaves nothing in the graph); torch.export notes that both inputs
# share the batch and sequence axes; torch.export itself uses a deprecated pytree check.
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
@pytest.mark.filterwarnings("ignore:# The axis name:UserWarning")
@pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning")
@pytest.mark.parametrize(
    ("case", "exporter"),
    [(case, "legacy") for case in CASES] + [(case, "dynamo") for case in DYNAMO_CASES],
)
def test_exported_model_matches_torch_at_other_sizes(case: str, exporter: str, tmp_path: Path) -> None:
    model = make(case)
    path = tmp_path / "model.onnx"
    (export_legacy if exporter == "legacy" else export_dynamo)(model, path)

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == INPUTS
    assert [o.name for o in session.get_outputs()] == output_names(model)
    for output in session.get_outputs():
        assert isinstance(output.shape[0], str), f"{output.name} has a fixed batch size: {output.shape}"

    for lengths, width in [([9, 0, 4], 9), ([1], 1), ([MAX_LEN] * 4, MAX_LEN)]:
        ids, mask = example(lengths, width, seed=width)
        got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        with torch.no_grad():
            want = [t for t in model(ids, mask) if t is not None]
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g.shape == tuple(w.shape)
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5)
