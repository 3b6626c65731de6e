"""`attnserve-train document` end to end: a document head learned over a served model's windows,
exported with `attnserve-export DIR` and served by a real server with `--long-text windows`.

The window model is a tiny attention_pool classifier of max_len 16 trained here on short
reviews (tests/support/tiny_bert.py: "The film was good.", some with a neutral "And the plot,
well, it was music!" after them) and exported as a bundle. A long document is 4 to 8 neutral
sentences with one verdict among them, labelled by the verdict: several windows of 16 tokens,
most of them neutral. The oracle for the windows is the server's own tokenizer class
(`TextTokenizer.encode_windows`) and onnxruntime run on each window alone.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from attnserve.export.cli import main as export_main
from attnserve.export.parity import torch_threads
from attnserve.export.writer import export_run
from attnserve.service.bundle import (
    COMBINES,
    MANIFEST_FILE,
    DocumentHead,
    LongTexts,
    read_bundle,
    sha256_file,
)
from attnserve.service.client import Client
from attnserve.training.cli.main import main as train_main
from attnserve.training.document.head import best
from attnserve.training.document.record import CACHE_FILE, DOCUMENT_FILE, read_record
from attnserve.training.loop.trainer import TrainConfig
from attnserve.training.run.pipeline import DataSpec, train_run
from tests.support.long_texts import served_tokenizer, write_csv
from tests.support.servers import RunningServer, make_settings
from tests.support.tiny_bert import BAD, GOOD, NOUNS, write_reviews

WINDOW = 16  # the window model's max_len: a document needs several windows
NAME = "long-reviews"


@pytest.fixture(scope="module")
def window_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("window-model")
    data = write_reviews(root / "reviews.csv", 600, seed=0)
    config = TrainConfig(
        epochs=12, batch_size=32, lr=0.01, progress=False, seed=0, threads=1, word_dropout=0.0
    )
    with torch_threads(1):
        run = train_run(
            root / "run",
            "attention_pool",
            {"d_model": 16},
            config,
            DataSpec(path=str(data), seed=0, max_len=WINDOW),
        )
    return export_run(run.run_dir, root / "models", "reviews")


def long_documents(n: int, seed: int) -> list[tuple[str, str]]:
    """`n` documents of 4 to 8 neutral sentences and one verdict, labelled by the verdict."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        positive = rng.random() < 0.5
        parts = [
            f"And the {rng.choice(NOUNS)}, well, it was {rng.choice(NOUNS)}!"
            for _ in range(rng.randint(4, 8))
        ]
        verdict = f"The {rng.choice(NOUNS)} was {rng.choice(GOOD if positive else BAD)}."
        parts.insert(rng.randint(0, len(parts)), verdict)
        out.append((" ".join(parts), "positive" if positive else "negative"))
    return out


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_csv(tmp_path_factory.mktemp("documents") / "long.csv", long_documents(300, seed=1))


@pytest.fixture(scope="module")
def run_document(
    window_model: Path, documents: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., Path]:
    runs: dict[tuple[str, ...], Path] = {}

    def run(*flags: str) -> Path:
        if flags not in runs:
            out = tmp_path_factory.mktemp("document-run")
            argv = [
                "document",
                "--data",
                str(documents),
                "--window-model",
                str(window_model),
                "--out",
                str(out),
                "--epochs",
                "30",
                *flags,
            ]
            assert train_main(argv) == 0
            runs[flags] = out
        return runs[flags]

    return run


def window_oracle(bundle: Path, policy: LongTexts, texts: list[str]) -> list[np.ndarray]:
    """Per text its windows' logits [W, C]: windows cut by `encode_windows`, each run alone."""
    tokenizer = served_tokenizer(bundle, policy)
    session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    windows, _ = tokenizer.encode_windows(texts)
    out = []
    for each in windows:
        rows = []
        for encoding in each:
            ids = np.asarray([encoding.ids], np.int64)
            rows.append(
                session.run(["logits"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0][0]
            )
        out.append(np.stack(rows))
    return out


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max())
    return np.asarray(e / e.sum())


def test_document_json_records_the_window_model_the_choice_and_the_data(
    run_document: Callable[..., Path], window_model: Path, documents: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_document()
    assert "epoch 30/30" in capsys.readouterr().err  # a progress line per epoch
    record = read_record(out)
    bundle = read_bundle(window_model).manifest
    assert record.window_model.path == str(window_model.resolve())
    assert (record.window_model.name, record.window_model.version) == ("reviews", 1)
    assert record.window_model.graph == "model.onnx"  # no label graph in this bundle
    assert record.window_model.files == {name: sha256_file(window_model / name) for name in bundle.files}
    assert record.data.file.sha256 == sha256_file(documents) and record.data.file.rows == 300
    split = record.data.split
    assert (split.train, split.validation, split.fraction) == (240, 60, 0.2)
    policy = record.policy
    assert (policy.window, policy.stride, policy.max_windows) == (WINDOW, (WINDOW - 2) // 4, 16)
    # The head's validation accuracy beside mean's and max's; the best of the three is the policy.
    validation = record.figures["validation"]
    assert policy.chosen == {combine: validation[combine] for combine in COMBINES}
    assert policy.combine == best(policy.chosen)
    assert (policy.head is not None) == (policy.combine == "head")
    assert validation["head"] > validation["mean"]  # one verdict among neutral windows: the mean blurs it
    # By default the head reads each window's pooled vector (d_model 16) and its 2 logits.
    assert record.head.reads == record.training.reads == "vectors"
    assert len(record.head.weights) == 16 and len(record.head.weights[0]) == 16 + 2
    assert record.training.best_epoch is not None and record.training.validation_loss is not None
    assert record.figures["train"]["texts"] == 240 and validation["windows"] > 2 * validation["texts"]


def test_the_cached_window_logits_are_the_graphs_on_the_servers_windows(
    run_document: Callable[..., Path], window_model: Path, documents: Path
) -> None:
    out = run_document()
    policy = read_record(out).policy
    texts = [text for text, _ in long_documents(300, seed=1)]
    with np.load(out / CACHE_FILE) as cache:
        logits, counts = cache["logits"], cache["counts"]
    oracle = window_oracle(window_model, policy, texts)
    assert counts.tolist() == [len(each) for each in oracle]
    np.testing.assert_allclose(logits, np.concatenate(oracle), atol=1e-5)


def test_the_head_exports_and_serves_as_trained(
    run_document: Callable[..., Path], window_model: Path, tmp_path: Path
) -> None:
    out = run_document("--combine", "head", "--head-input", "logits")
    record = read_record(out)
    assert record.policy.combine == "head" and record.policy.head == record.head
    assert (
        record.head.reads == "logits" and len(record.head.weights) == 8 and len(record.head.weights[0]) == 2
    )
    repository = tmp_path / "models"
    assert export_main([str(out), "--repository", str(repository), "--name", NAME]) == 0
    version = repository / NAME / "1"
    manifest = read_bundle(version).manifest
    window = read_bundle(window_model).manifest
    assert manifest.long_texts == record.policy
    assert manifest.files == window.files and manifest.golden == window.golden
    assert (manifest.name, manifest.version) == (NAME, 1)
    text = long_documents(1, seed=7)[0][0]
    head = manifest.long_texts.head if manifest.long_texts else None
    assert isinstance(head, DocumentHead)
    (logits,) = window_oracle(version, record.policy, [text])
    temperature = manifest.calibration.temperature if manifest.calibration else 1.0
    with (
        RunningServer(make_settings(repository, long_text="windows")) as server,
        Client(server.target) as client,
    ):
        result = client.classify(text, model=NAME).results[0]
    assert len(result.windows) == len(logits) >= 3
    np.testing.assert_allclose([w.weight for w in result.windows], head.scores(logits), atol=1e-5)
    np.testing.assert_allclose(
        [w.probabilities for w in result.windows], [softmax(z / temperature) for z in logits], atol=1e-5
    )
    weighted = head.scores(logits) @ logits
    np.testing.assert_allclose(result.probabilities, softmax(weighted / temperature), atol=1e-5)


def test_a_label_the_window_model_lacks_is_refused_by_name(
    window_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = long_documents(5, seed=3)
    rows[2] = (rows[2][0], "neutral")
    data = write_csv(tmp_path / "long.csv", rows)
    argv = [
        "document",
        "--data",
        str(data),
        "--window-model",
        str(window_model),
        "--out",
        str(tmp_path / "out"),
    ]
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    assert "row 3's label 'neutral'" in err and "['negative', 'positive']" in err
    assert not (tmp_path / "out" / DOCUMENT_FILE).exists()


def test_a_window_model_changed_since_training_is_refused_at_export(
    run_document: Callable[..., Path], window_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "copy" / "reviews" / "1"
    shutil.copytree(window_model, copy)
    run = tmp_path / "run"
    shutil.copytree(run_document("--combine", "head"), run)
    record = json.loads((run / DOCUMENT_FILE).read_text())
    record["window_model"]["path"] = str(copy)
    (run / DOCUMENT_FILE).write_text(json.dumps(record))
    with open(copy / "tokenizer.json", "a", encoding="utf-8") as handle:
        handle.write("\n")  # the same tokenizer to any reader, another file to its sha256
    repository = tmp_path / "models"
    assert export_main([str(run), "--repository", str(repository), "--name", NAME]) == 2
    err = capsys.readouterr().err
    assert "changed since" in err and "tokenizer.json" in err
    assert not (repository / NAME).exists()


def test_a_multi_label_window_model_is_refused(
    window_model: Path, documents: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "reviews" / "1"
    shutil.copytree(window_model, copy)
    manifest = json.loads((copy / MANIFEST_FILE).read_text())
    manifest["scoring"] = {"problem": "multi_label_classification", "thresholds": [0.5, 0.5]}
    manifest["calibration"] = None
    (copy / MANIFEST_FILE).write_text(json.dumps(manifest))
    argv = ["document", "--data", str(documents), "--window-model", str(copy), "--out", str(tmp_path / "out")]
    assert train_main(argv) == 2
    assert "multi_label_classification model; a document head combines" in capsys.readouterr().err


def test_valid_and_test_files_are_read_as_given(
    run_document: Callable[..., Path], tmp_path: Path, documents: Path
) -> None:
    valid = write_csv(tmp_path / "valid.csv", long_documents(40, seed=5))
    test = write_csv(tmp_path / "test.csv", long_documents(30, seed=6))
    record = read_record(run_document("--valid", str(valid), "--test", str(test)))
    split = record.data.split
    assert (split.train, split.validation, split.fraction) == (300, 40, None)
    assert split.valid is not None and split.valid.sha256 == sha256_file(valid)
    assert split.test is not None and split.test.rows == 30
    assert record.figures["test"]["texts"] == 30 and set(COMBINES) < set(record.figures["test"])
    assert record.policy.chosen == {combine: record.figures["validation"][combine] for combine in COMBINES}


def test_the_windows_are_run_on_the_label_graph_where_the_bundle_has_one(
    window_model: Path, tmp_path: Path
) -> None:
    """A label graph that doubles model.onnx's logits tells which graph the cache came from."""
    import onnx
    from onnx import helper

    copy = tmp_path / "reviews" / "1"
    shutil.copytree(window_model, copy)
    graph = onnx.load(str(copy / "model.onnx"))
    for output in list(graph.graph.output):
        graph.graph.output.remove(output)
    for node in graph.graph.node:
        node.output[:] = ["graph_logits" if name == "logits" else name for name in node.output]
    graph.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(2.0, np.float32), "two"))
    graph.graph.node.append(helper.make_node("Mul", ["graph_logits", "two"], ["logits"]))
    graph.graph.output.append(helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["batch", 2]))
    onnx.save(graph, str(copy / "label.onnx"))
    manifest = json.loads((copy / MANIFEST_FILE).read_text())
    manifest["label_graph"] = {"file": "label.onnx"}
    manifest["files"]["label.onnx"] = sha256_file(copy / "label.onnx")
    (copy / MANIFEST_FILE).write_text(json.dumps(manifest))
    rows = long_documents(20, seed=9)
    data = write_csv(tmp_path / "long.csv", rows)
    argv = [
        "document",
        "--data",
        str(data),
        "--window-model",
        str(copy),
        "--out",
        str(tmp_path / "out"),
        "--epochs",
        "1",
    ]
    assert train_main(argv) == 0
    record = read_record(tmp_path / "out")
    assert record.window_model.graph == "label.onnx" and "label.onnx" in record.window_model.files
    with np.load(tmp_path / "out" / CACHE_FILE) as cache:
        logits = cache["logits"]
    oracle = window_oracle(copy, record.policy, [text for text, _ in rows])
    np.testing.assert_allclose(logits, 2 * np.concatenate(oracle), atol=1e-5)
