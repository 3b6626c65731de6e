"""`attnserve-train distill` from a Hugging Face classifier: the folder ``save_pretrained`` wrote,
or the bundle ``attnserve-export FOLDER`` imported it as; then the student and that teacher
published as a cascade (``attnserve-export cascade``) and served by a real server.

The teacher is a tiny BERT classifier (tests/export/hf_classifiers.py) given signal by a few
steps of plain PyTorch training on generated reviews; its id2label lists "positive" first, the
reverse of the data's sorted order, so the student must take the teacher's order for the
cascade. Students are tiny attention_pool runs through the real training pipeline, learning
the teacher alone (alpha 1) on one thread.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers

from attnserve.export.cascade import CascadeRequest, export_cascade
from attnserve.export.cli import main as export_main
from attnserve.export.errors import ExportRequestError
from attnserve.export.parity import torch_threads
from attnserve.service.bundle import LABEL_MODEL_FILE
from attnserve.service.bundle.cascade import read_cascade
from attnserve.service.client import Client
from attnserve.training.cli.main import main as train_main
from attnserve.training.data.spec import DataSpec, load_dataset
from attnserve.training.distill.augment import AugmentConfig
from attnserve.training.distill.bundle_teacher import GraphTeacher
from attnserve.training.distill.hf_teacher import FolderTeacher, load_folder_teacher
from attnserve.training.distill.loss import DistillLoss
from attnserve.training.distill.sources import open_teacher
from attnserve.training.distill.student import DistillSpec
from attnserve.training.distill.teacher import TeacherError, compute_logits, load_teacher
from attnserve.training.loop.trainer import TrainConfig
from attnserve.training.run.pipeline import RunResult, train_run
from tests.export.hf_classifiers import ARCHITECTURES, POSITIONS, save_classifier
from tests.support.problem_models import problem_folder
from tests.support.servers import RunningServer, make_settings
from tests.support.tiny_bert import sentences, write_reviews

TEACHER_LABELS = ("positive", "negative")  # id2label: not the data's sorted order
STUDENT = {"d_model": 8}
CPU = torch.device("cpu")
ATOL = 1e-4


@dataclasses.dataclass(frozen=True)
class Setup:
    folder: Path  # the teacher as save_pretrained wrote it
    data: Path  # the students' reviews
    bundle: Path  # the folder imported by attnserve-export: REPOSITORY/imported/1
    student: RunResult  # distilled from the folder


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    with torch_threads(1):  # tiny models: extra threads only add contention
        yield


def _train_teacher(folder: Path, steps: int = 40) -> Path:
    """The tiny BERT classifier, trained a few steps on reviews, saved back into ``folder``."""
    arch = dataclasses.replace(ARCHITECTURES["bert"], labels=TEACHER_LABELS)
    save_classifier(arch, folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder)
    rows, rng = sentences(200, seed=7), random.Random(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        batch = rng.sample(rows, 32)
        encoded = tokenizer([t for t, _ in batch], padding=True, truncation=True, return_tensors="pt")
        labels = torch.tensor([TEACHER_LABELS.index(label) for _, label in batch])
        model(**encoded, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval().save_pretrained(folder)
    return folder


def _transformers_logits(folder: Path, texts: list[str], max_len: int = POSITIONS) -> np.ndarray:
    """What transformers itself says: the folder's tokenizer and model, its default attention."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        encoded = tokenizer(texts, padding=True, truncation=True, max_length=max_len, return_tensors="pt")
        logits: np.ndarray = model(**encoded).logits.numpy()
    return logits


def _distil(out: Path, data: Path, teacher: Path, *, epochs: int = 30, augment: int = 1) -> RunResult:
    spec = DistillSpec(str(teacher), DistillLoss("mse", alpha=1.0), AugmentConfig(augment))
    return train_run(
        out,
        "attention_pool",
        STUDENT,
        TrainConfig(epochs=epochs, batch_size=32, lr=1e-2, progress=False, seed=1, threads=1),
        DataSpec(path=str(data)),
        distill=spec,
    )


def _cached(run_dir: Path) -> np.ndarray:
    (cache,) = (run_dir / "teacher").glob("logits-*.npz")
    with np.load(cache) as saved:
        logits: np.ndarray = saved["logits"]
    return logits  # the teacher's own label order: texts, augmented texts, validation texts


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    root = tmp_path_factory.mktemp("hf-teacher")
    folder = _train_teacher(root / "teacher")
    data = write_reviews(root / "reviews.csv", 200, seed=3)
    repository = root / "models"
    assert export_main([str(folder), "--repository", str(repository), "--name", "imported"]) == 0
    student = _distil(root / "student", data, folder)
    return Setup(folder, data, repository / "imported" / "1", student)


def test_a_student_learns_the_logits_transformers_gives_for_a_folder(setup: Setup) -> None:
    run_dir, metrics = setup.student.run_dir, setup.student.metrics
    record = metrics["teacher"]
    assert (record["kind"], record["family"]) == ("hf_folder", "transformers")
    assert record["architecture"] == "BertForSequenceClassification" and record["max_len"] == POSITIONS
    assert not record["logits_cached"] and record["augmented_rows"] > 0
    assert record["val_accuracy"] > 0.9  # the teacher's own skill, on the student's validation split
    assert metrics["labels"] == list(TEACHER_LABELS)  # the teacher's order, for a cascade of the two
    # The cached logits are transformers' own, for the training texts and the validation texts.
    train = [e.text for e in load_dataset(DataSpec(path=str(setup.data))).train]
    val = [json.loads(line)["text"] for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    cached = _cached(run_dir)
    assert len(cached) == len(train) + record["augmented_rows"] + len(val)
    np.testing.assert_allclose(cached[: len(train)], _transformers_logits(setup.folder, train), atol=ATOL)
    np.testing.assert_allclose(cached[-len(val) :], _transformers_logits(setup.folder, val), atol=ATOL)
    # It learnt them: on texts neither saw, the student answers as the teacher does.
    held_out = [text for text, _ in sentences(200, seed=99)]
    student = compute_logits(load_teacher(run_dir), held_out, CPU).argmax(-1)
    teacher = _transformers_logits(setup.folder, held_out).argmax(-1)
    assert float((student == teacher).mean()) > 0.9


def test_an_imported_bundle_teaches_through_its_folder_else_through_its_graph(
    setup: Setup, tmp_path: Path
) -> None:
    via_folder = _distil(tmp_path / "via-folder", setup.data, setup.bundle, epochs=1).metrics["teacher"]
    assert (via_folder["kind"], via_folder["bundle"]) == ("bundle", "imported/1")
    assert via_folder["folder"] == str(setup.folder) and "graph" not in via_folder
    # The same model cut at the same length: the folder student's logits, under its checksum.
    assert via_folder["checksum"] == setup.student.metrics["teacher"]["checksum"]
    # Where the folder is gone, the bundle's own graph scores the texts (onnxruntime, float32).
    moved = tmp_path / "models" / "imported" / "1"
    shutil.copytree(setup.bundle, moved)
    manifest = json.loads((moved / "bundle.json").read_text())
    manifest["training_metrics"]["source"]["folder"] = str(tmp_path / "gone")
    (moved / "bundle.json").write_text(json.dumps(manifest))
    graph = _distil(tmp_path / "via-graph", setup.data, moved, epochs=1)
    record = graph.metrics["teacher"]
    assert record["kind"] == "bundle" and record["graph"] == LABEL_MODEL_FILE  # float32: no --rows gated it
    assert record["family"] == "encoder" and record["checksum"] != via_folder["checksum"]
    train = [e.text for e in load_dataset(DataSpec(path=str(setup.data))).train]
    cached = _cached(graph.run_dir)[: len(train)]
    np.testing.assert_allclose(cached, _transformers_logits(setup.folder, train), atol=ATOL)


def test_an_imported_bundle_whose_folder_holds_other_weights_is_scored_by_its_graph(
    setup: Setup, tmp_path: Path
) -> None:
    folder = tmp_path / "retrained"
    shutil.copytree(setup.folder, folder)
    assert export_main([str(folder), "--repository", str(tmp_path / "models"), "--name", "mine"]) == 0
    bundle = tmp_path / "models" / "mine" / "1"
    assert isinstance(open_teacher(bundle), FolderTeacher)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder)
    with torch.no_grad():
        model.classifier.bias.add_(torch.tensor([1.0, -1.0]))  # config.json stays as it was
    model.save_pretrained(folder)
    teacher = open_teacher(bundle)  # the golden logits tell the weights apart
    assert isinstance(teacher, GraphTeacher) and teacher.record()["graph"] == LABEL_MODEL_FILE
    with pytest.raises(TeacherError, match=r"--teacher-max-len 8: the bundle .* is scored by its graph"):
        open_teacher(bundle, 8)


def test_the_student_and_its_imported_teacher_serve_as_a_cascade(setup: Setup, tmp_path: Path) -> None:
    repository = tmp_path / "models"
    student = setup.student.run_dir
    for name, teacher in (("distilled", setup.bundle), ("from-folder", setup.folder)):
        version = export_cascade(CascadeRequest(student, teacher, repository, name, max_drop=0.05))
        manifest = read_cascade(version, expect_name=name, expect_version=1).manifest
        assert manifest.labels == list(TEACHER_LABELS)
        assert manifest.figures.rows.file == "test.jsonl"  # the student run's test split
        assert manifest.figures.teacher_accuracy > 0.9
    texts = [text for text, _ in sentences(12, seed=123)] + ["film film film film", "zebra!"]
    with RunningServer(make_settings(repository)) as server, Client(server.target, timeout=30) as client:
        for name in ("distilled", "from-folder"):
            reply = client.classify(texts, model=name)
            assert (reply.model, reply.version) == (name, 1)
            assert all(r.answered_by in ("student", "teacher") for r in reply.results)
            assert all(r.label in TEACHER_LABELS for r in reply.results)
    with pytest.raises(TeacherError, match="is a cascade version; give its teacher member"):
        open_teacher(repository / "distilled" / "1")


def test_a_teacher_max_len_cuts_the_teachers_texts(setup: Setup) -> None:
    texts = [text for text, _ in sentences(20, seed=5)]
    short = load_folder_teacher(setup.folder, 8)
    np.testing.assert_allclose(
        short.logits(texts, CPU, 0), _transformers_logits(setup.folder, texts, max_len=8), atol=ATOL
    )
    assert short.checksum != load_folder_teacher(setup.folder).checksum  # other logits, other cache
    with pytest.raises(TeacherError, match="--teacher-max-len 41: the model reads 1 to 40 tokens"):
        load_folder_teacher(setup.folder, POSITIONS + 1)


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert train_main(["distill", *argv, "--epochs", "1"]) == 2
    return " ".join(capsys.readouterr().err.split())


def test_a_multi_label_teacher_folder_is_refused(
    setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    texts = [text for text, _ in sentences(20, seed=1)]
    folder = problem_folder(tmp_path / "tags", TEACHER_LABELS, "multi_label_classification", 0, texts)
    with pytest.raises(TeacherError, match=r"multi_label_classification model .*softmax over one label"):
        _distil(tmp_path / "direct", setup.data, folder)
    argv = ["--teacher", str(folder), "--data", str(setup.data), "--out", str(tmp_path / "cli")]
    err = _refused(argv, capsys)
    assert "a sigmoid per label" in err and "softmax over one label per text" in err
    # As a cascade's teacher, the folder is refused from its config.json, before any export.
    request = CascadeRequest(setup.student.run_dir, folder, tmp_path / "models", "tags")
    with pytest.raises(ExportRequestError, match="the teacher a multi_label_classification one"):
        export_cascade(request)
    assert not (tmp_path / "models" / "tags").exists()


def test_a_teacher_folder_of_other_labels_or_custom_code_is_refused(
    setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    moods = tmp_path / "moods.csv"
    text = setup.data.read_text().replace(",positive", ",happy").replace(",negative", ",sad")
    moods.write_text(text)
    argv = ["--teacher", str(setup.folder), "--data", str(moods), "--out", str(tmp_path / "moods")]
    assert "the teacher's labels ['negative', 'positive'] differ from the data's ['happy', 'sad']" in (
        _refused(argv, capsys)
    )
    custom = tmp_path / "custom"
    shutil.copytree(setup.folder, custom)
    config: dict[str, Any] = json.loads((custom / "config.json").read_text())
    config["auto_map"] = {"AutoModelForSequenceClassification": "modeling.Mine"}
    (custom / "config.json").write_text(json.dumps(config))
    argv = ["--teacher", str(custom), "--data", str(setup.data), "--out", str(tmp_path / "custom-out")]
    err = _refused(argv, capsys)  # in the words attnserve-export uses for the folder
    assert "maps classes to custom code" in err and "never trust_remote_code" in err
