"""The pooled vector a document head reads: found in every family's graph by walking back from
`logits` through the final linear layer (export/vector_graph.py), refused where there is none.

Families: the shipped gru_attention SST-2 model (its final layer dynamic int8), the shipped
car-order transformer, and a tiny BERT made with transformers and imported (model.onnx float32,
label.onnx int8 per channel), whose vector must be transformers' own pooler output. End to
end on test_document_head.py's runs: the vectors training caches are the exported graph's, and
a head that reads them serves (weights, probabilities, occlusion) as trained.
"""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import transformers
from onnx import TensorProto, helper, numpy_helper

from attnserve.export.cli import main as export_main
from attnserve.export.parity import torch_threads
from attnserve.export.vector_graph import (
    VECTOR,
    NoFinalLayer,
    check_vectors,
    find_final_layer,
    with_vector,
    write_with_vector,
)
from attnserve.service.bundle import MANIFEST_FILE, LongTexts, read_bundle, sha256_file
from attnserve.service.client import Client
from attnserve.service.engine.models.runtime import pad_ids
from attnserve.training.cli.main import main as train_main
from attnserve.training.document.record import CACHE_FILE, read_record
from tests.export.hf_classifiers import ARCHITECTURES, POSITIONS, save_classifier, texts
from tests.support.long_texts import served_tokenizer
from tests.support.servers import RunningServer, make_settings
from tests.training import test_document_head as base

ROOT = Path(__file__).resolve().parents[2]


def run(graph: onnx.ModelProto | Path, rows: list[list[int]], pad: int, names: list[str]) -> list[np.ndarray]:
    source = graph.SerializeToString() if isinstance(graph, onnx.ModelProto) else str(graph)
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    ids, mask = pad_ids(rows, pad)
    return list(session.run(names, {"input_ids": ids, "attention_mask": mask}))


def golden_rows(bundle: Path) -> tuple[list[list[int]], int]:
    manifest = read_bundle(bundle).manifest
    return [case.input_ids for case in manifest.golden if case.input_ids], manifest.pad_id


@pytest.mark.parametrize(("bundle", "int8"), [("sst2-sentiment/2", True), ("car-order/1", False)])
def test_the_shipped_families_give_the_vector_their_logits_come_from(
    bundle: str, int8: bool, tmp_path: Path
) -> None:
    folder = ROOT / "models" / bundle
    rows, pad = golden_rows(folder)
    graph, layer = with_vector(onnx.load(str(folder / "model.onnx")))
    assert layer.int8 == int8
    logits, vectors = run(graph, rows, pad, ["logits", VECTOR])
    (before,) = run(folder / "model.onnx", rows, pad, ["logits"])
    np.testing.assert_array_equal(logits, before)  # the extra output leaves the logits as they were
    assert vectors.shape == (len(rows), layer.size)
    np.testing.assert_allclose(layer.logits(vectors), logits, atol=1e-4)
    check_vectors(layer, logits, vectors, bundle)
    size = write_with_vector(folder / "model.onnx", tmp_path / "model.onnx", rows, pad)
    assert size == layer.size and VECTOR in [
        o.name for o in onnx.load(str(tmp_path / "model.onnx")).graph.output
    ]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny BERT classifier as transformers saves it, imported with --rows (label.onnx int8)."""
    root = tmp_path_factory.mktemp("bert")
    folder = save_classifier(ARCHITECTURES["bert"], root / "classifier")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    rows = texts(40, seed=1)
    with torch.inference_mode(), torch_threads(1):
        encoded = tokenizer(
            rows, padding=True, truncation=True, max_length=POSITIONS - 2, return_tensors="pt"
        )
        predicted = model(**encoded).logits.argmax(-1).tolist()
    with open(root / "rows.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows((text, model.config.id2label[i]) for text, i in zip(rows, predicted, strict=True))
    argv = [
        str(folder),
        "--repository",
        str(root / "models"),
        "--name",
        "bert",
        "--rows",
        str(root / "rows.csv"),
    ]
    with torch_threads(1):
        assert export_main([*argv, "--max-accuracy-drop", "100", "--no-latency"]) == 0
    return folder, root / "models" / "bert" / "1"


def test_a_tiny_bert_gives_transformers_pooler_output_from_both_graphs(tiny_bert: tuple[Path, Path]) -> None:
    folder, bundle = tiny_bert
    manifest = read_bundle(bundle).manifest
    assert manifest.label_graph is not None
    rows, pad = golden_rows(bundle)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.inference_mode():
        pooled = [model.bert(input_ids=torch.tensor([row])).pooler_output[0].numpy() for row in rows]
    for file, tolerance in (("model.onnx", 1e-4), (manifest.label_graph.file, 5e-2)):
        graph, layer = with_vector(onnx.load(str(bundle / file)))
        logits, vectors = run(graph, rows, pad, ["logits", VECTOR])
        assert layer.size == 32 and layer.int8 == (file != "model.onnx")  # label.onnx: int8 per channel
        check_vectors(layer, logits, vectors, file)
        np.testing.assert_allclose(vectors, np.stack(pooled), atol=tolerance)


def tiny_graph(tail: str) -> onnx.ModelProto:
    """input_ids -> embedding -> mean -> Gemm -> `tail` (an op) -> logits."""
    table = numpy_helper.from_array(np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32), "table")
    weight = numpy_helper.from_array(np.ones((2, 4), np.float32), "weight")
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["embedded"]),
        helper.make_node("ReduceMean", ["embedded"], ["pooled"], axes=[1], keepdims=0),
        helper.make_node("Gemm", ["pooled", "weight"], ["scores"], transB=1),
        helper.make_node(tail, ["scores"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2])],
        [table, weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_graph_whose_logits_come_out_of_no_final_linear_layer_is_refused() -> None:
    assert find_final_layer(tiny_graph("Identity")).size == 4  # Identity is passed through
    with pytest.raises(NoFinalLayer, match="comes out of Relu"):
        find_final_layer(tiny_graph("Relu"))
    layer = find_final_layer(tiny_graph("Identity"))
    vectors = np.ones((3, 4), np.float32)
    with pytest.raises(NoFinalLayer, match="not the one the logits come from"):
        check_vectors(layer, np.zeros((3, 2), np.float32), vectors, "tiny")


# The document runs of test_document_head.py: a tiny attention_pool window model and documents.
window_model = base.window_model
documents = base.documents
run_document = base.run_document


def served_windows(bundle: Path, policy: LongTexts, text: str) -> tuple[np.ndarray, np.ndarray]:
    """The exported version's graph on each window of `text` alone: logits [W, C], vectors [W, D]."""
    manifest = read_bundle(bundle).manifest
    tokenizer = served_tokenizer(bundle, policy)
    (windows,), _ = tokenizer.encode_windows([text])
    ran = [run(bundle / "model.onnx", [list(e.ids)], manifest.pad_id, ["logits", VECTOR]) for e in windows]
    return np.concatenate([r[0] for r in ran]), np.concatenate([r[1] for r in ran])


def test_a_vector_head_caches_the_served_graphs_vectors_and_serves_as_trained(
    run_document: Callable[..., Path], window_model: Path, tmp_path: Path
) -> None:
    out = run_document("--combine", "head")
    record = read_record(out)
    head = record.head
    assert head.reads == "vectors" and record.policy.head == head
    repository = tmp_path / "models"
    assert export_main([str(out), "--repository", str(repository), "--name", base.NAME]) == 0
    version = repository / base.NAME / "1"
    manifest = read_bundle(version).manifest
    assert [(o.name, o.shape) for o in manifest.outputs if o.name == VECTOR] == [(VECTOR, ["batch", 16])]
    window = read_bundle(window_model).manifest
    assert manifest.files["tokenizer.json"] == window.files["tokenizer.json"]
    assert manifest.files["model.onnx"] != window.files["model.onnx"]  # the graph gained `vector`
    # What training cached is what the served graph gives, window by window.
    texts = [text for text, _ in base.long_documents(300, seed=1)]
    with np.load(out / CACHE_FILE) as cache:
        cached, counts = cache["vectors"], cache["counts"]
    first = [served_windows(version, record.policy, text) for text in texts[:5]]
    np.testing.assert_allclose(
        cached[: int(counts[:5].sum())], np.concatenate([v for _, v in first]), atol=1e-5
    )
    text = base.long_documents(1, seed=7)[0][0]
    logits, vectors = served_windows(version, record.policy, text)
    weights = head.scores(logits, vectors)
    with (
        RunningServer(make_settings(repository, long_text="windows")) as server,
        Client(server.target, timeout=30) as client,
    ):
        result = client.classify(text, model=base.NAME).results[0]
        occluded = client.classify(text, model=base.NAME, attribution="occlusion").results[0]
    assert len(result.windows) == len(logits) >= 3
    np.testing.assert_allclose([w.weight for w in result.windows], weights, atol=1e-5)
    np.testing.assert_allclose(result.probabilities, base.softmax(weights @ logits), atol=1e-5)
    # Occlusion leaves a window out of the fold: the head weighs the others from their vectors.
    label = result.label_id
    full = base.softmax(weights @ logits)[label]
    drops = []
    for w in range(len(logits)):
        z, v = np.delete(logits, w, axis=0), np.delete(vectors, w, axis=0)
        drops.append(full - base.softmax(head.scores(z, v) @ z)[label])
    np.testing.assert_allclose([float(w.attribution or 0) for w in occluded.windows], drops, atol=1e-5)


def test_head_input_vectors_is_refused_where_the_graph_has_no_final_linear_layer(
    window_model: Path, documents: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "reviews" / "1"
    shutil.copytree(window_model, copy)
    graph = onnx.load(str(copy / "model.onnx"))
    for node in graph.graph.node:
        node.output[:] = ["graph_logits" if name == "logits" else name for name in node.output]
    graph.graph.node.append(helper.make_node("Relu", ["graph_logits"], ["logits"]))
    onnx.save(graph, str(copy / "model.onnx"))
    manifest = json.loads((copy / MANIFEST_FILE).read_text())
    manifest["files"]["model.onnx"] = sha256_file(copy / "model.onnx")
    (copy / MANIFEST_FILE).write_text(json.dumps(manifest))
    argv = ["document", "--data", str(documents), "--window-model", str(copy), "--out", str(tmp_path / "out")]
    assert train_main([*argv, "--head-input", "vectors"]) == 2
    assert "--head-input vectors" in (err := capsys.readouterr().err) and "comes out of Relu" in err
