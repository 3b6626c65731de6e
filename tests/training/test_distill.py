"""Distillation: a student of another family learns a teacher run's logits, cached per teacher.

The teacher is a tiny mean_pool run trained here on the sentence files of the users'-data
tests; students are tiny gru_attention runs on the same file. Everything runs through the
real training pipeline and, for the refusals, the real command line.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from attnserve.export.parity import torch_threads
from attnserve.training.cli.main import main
from attnserve.training.distill.augment import AugmentConfig
from attnserve.training.distill.loss import DistillLoss
from attnserve.training.distill.student import DistillSpec
from attnserve.training.distill.teacher import TeacherError, compute_logits, load_teacher
from attnserve.training.loop.trainer import TrainConfig
from attnserve.training.run.checkpoint import load_run
from attnserve.training.run.pipeline import DataSpec, RunResult, train_run
from tests.training.sentences import sentence, write_sentences

STUDENT = {"d_model": 8, "n_queries": 2}


def _teacher(root: Path, data: Path, *, seed: int = 0, labels: tuple[str, ...] | None = None) -> Path:
    with torch_threads(1):
        run = train_run(
            root,
            "mean_pool",
            {"d_model": 16},
            TrainConfig(epochs=30, batch_size=32, lr=1e-2, progress=False, seed=seed),
            DataSpec(path=str(data), text_column="sentence", labels=labels),
        )
    return run.run_dir


def _student(
    out: Path,
    data: Path,
    teacher: Path | None,
    *,
    labels: tuple[str, ...] | None = None,
    epochs: int = 10,
    seed: int = 1,
) -> RunResult:
    spec = (
        None
        if teacher is None
        else DistillSpec(str(teacher), DistillLoss("mse", alpha=1.0), AugmentConfig(2))
    )
    with torch_threads(1):
        return train_run(
            out,
            "gru_attention",
            STUDENT,
            TrainConfig(epochs=epochs, batch_size=32, lr=1e-2, progress=False, seed=seed),
            DataSpec(path=str(data), text_column="sentence", labels=labels),
            distill=spec,
        )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the data file, a teacher run trained on it)."""
    root = tmp_path_factory.mktemp("distill")
    data = write_sentences(root / "reviews.csv", 400, 0)
    return data, _teacher(root / "teacher", data)


def _logits(run_dir: Path, texts: list[str]) -> np.ndarray:
    return compute_logits(load_teacher(run_dir), texts, torch.device("cpu"))


def test_a_student_on_soft_targets_matches_the_teacher_better_than_one_on_gold_labels(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    data, teacher = files
    distilled = _student(tmp_path / "distilled", data, teacher)
    gold = _student(tmp_path / "gold", data, None)
    rng = random.Random(99)
    held_out = [sentence(rng)[0] for _ in range(300)]  # texts neither run trained on
    target = _logits(teacher, held_out)
    gap = {
        run.run_dir.name: float(((_logits(run.run_dir, held_out) - target) ** 2).mean())
        for run in (distilled, gold)
    }
    assert gap["distilled"] < 0.5 * gap["gold"], gap
    record = distilled.metrics["teacher"]
    assert record["path"] == str(teacher.resolve()) and record["family"] == "mean_pool"
    assert record["augmented_rows"] > 0 and 0.5 < record["val_accuracy"] <= 1.0
    # Recorded where export reads the run's figures from (bundle.json's training_metrics).
    assert load_run(distilled.run_dir).metrics["teacher"] == record
    assert "teacher" not in gold.metrics


def test_the_teachers_logits_are_cached_per_teacher_and_recomputed_when_it_changes(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    data, trained = files
    teacher = tmp_path / "teacher"
    teacher.symlink_to(trained, target_is_directory=True)  # a path this test may point elsewhere
    out = tmp_path / "student"
    first = _student(out, data, teacher, epochs=1).metrics["teacher"]
    (cache,) = (out / "teacher").glob("logits-*.npz")
    written = cache.stat().st_mtime_ns
    second = _student(out, data, teacher, epochs=1).metrics["teacher"]
    assert (first["logits_cached"], second["logits_cached"]) == (False, True)
    assert cache.stat().st_mtime_ns == written and second["checksum"] == first["checksum"]
    teacher.unlink()
    teacher.symlink_to(_teacher(tmp_path / "other-teacher", data, seed=5), target_is_directory=True)
    third = _student(out, data, teacher, epochs=1).metrics["teacher"]
    assert not third["logits_cached"] and third["checksum"] != first["checksum"]
    (replaced,) = (out / "teacher").glob("logits-*.npz")  # the first teacher's are gone
    assert replaced.name.startswith(f"logits-{third['checksum'][:16]}-") and not cache.exists()


def test_a_teacher_with_the_classes_in_another_order_is_remapped(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    data, teacher = files
    assert load_run(teacher).labels == ["negative", "positive"]
    flipped = _student(tmp_path / "flipped", data, teacher, labels=("positive", "negative"), epochs=1)
    assert flipped.metrics["labels"] == ["positive", "negative"]
    # The teacher's accuracy on the student's validation split, by class name, is what the
    # remapped logits scored against the student's label ids.
    rows = [json.loads(line) for line in (flipped.run_dir / "eval.jsonl").read_text().splitlines()]
    said = _logits(teacher, [r["text"] for r in rows]).argmax(-1)
    names = load_run(teacher).labels
    right = [names[k] == flipped.metrics["labels"][r["label"]] for k, r in zip(said, rows, strict=True)]
    assert flipped.metrics["teacher"]["val_accuracy"] == pytest.approx(np.mean(right))
    assert np.mean(right) > 0.6  # a teacher read backwards would score below a coin


def test_a_teacher_of_other_labels_is_refused_naming_both_sets(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, teacher = files
    other = tmp_path / "moods.csv"
    rows = [
        line.replace("positive", "happy").replace("negative", "sad") for line in data.read_text().splitlines()
    ]
    other.write_text("\n".join(rows) + "\n")
    with pytest.raises(TeacherError, match=r"\['negative', 'positive'\].*\['happy', 'sad'\]"):
        _student(tmp_path / "direct", other, teacher)
    argv = ["distill", "--teacher", str(teacher), "--data", str(other), "--text-column", "sentence"]
    assert main([*argv, "--out", str(tmp_path / "cli"), "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert (
        "error: the teacher's labels ['negative', 'positive'] differ from the data's ['happy', 'sad']" in err
    )
    assert main([*argv[:1], "--teacher", str(tmp_path / "nowhere"), *argv[3:]]) == 2
    assert "no checkpoint.pt" in capsys.readouterr().err


def test_the_command_trains_a_student_whose_metrics_name_the_teacher(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    data, teacher = files
    out = tmp_path / "cli-student"
    argv = ["distill", "--teacher", str(teacher), "--data", str(data), "--text-column", "sentence"]
    argv += ["--model", "bow_mlp", "--hidden", "8", "--epochs", "2", "--distill-loss", "kl", "--alpha", "0.3"]
    assert main([*argv, "--out", str(out), "--augment", "1"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["family"] == "bow_mlp"
    assert {k: metrics["teacher"][k] for k in ("loss", "alpha", "augment")} == {
        "loss": "kl",
        "alpha": 0.3,
        "augment": 1,
    }
    assert metrics["plan"]["steps"] > 0  # --data: the run was planned from its size
    assert main([*argv, "--out", str(out), "--alpha", "1.5"]) == 2


def test_a_fine_tuned_encoder_teaches_a_gru_student(tmp_path: Path) -> None:
    from tests.support.tiny_bert import train_tiny_encoder_run, write_reviews

    with torch_threads(1):
        teacher = train_tiny_encoder_run(tmp_path / "bert")
    assert load_teacher(teacher).mask_token == "[MASK]"  # augmented texts mask the BERT way
    data = write_reviews(tmp_path / "more.csv", 200, seed=3)
    with torch_threads(1):
        student = train_run(
            tmp_path / "student",
            "gru_attention",
            STUDENT,
            TrainConfig(epochs=3, batch_size=32, lr=1e-2, progress=False, seed=1),
            DataSpec(path=str(data)),
            distill=DistillSpec(str(teacher), DistillLoss("kl", alpha=0.5), AugmentConfig(1)),
        )
    record = student.metrics["teacher"]
    assert record["family"] == "encoder" and record["augmented_rows"] > 0
    assert record["val_accuracy"] > 0.7  # the teacher's own skill, on the student's validation split


def test_the_bundle_of_a_student_names_its_teacher(files: tuple[Path, Path], tmp_path: Path) -> None:
    from attnserve.export.writer import export_run
    from attnserve.service.bundle import read_bundle

    data, teacher = files
    student = _student(tmp_path / "student", data, teacher, epochs=1)
    with torch_threads(1):
        bundle = read_bundle(export_run(student.run_dir, tmp_path / "models", "student"))
    assert bundle.manifest.family == "gru_attention"
    assert bundle.manifest.training_metrics["teacher"] == student.metrics["teacher"]
