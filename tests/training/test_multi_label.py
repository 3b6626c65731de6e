"""--multi-label: label cells holding several labels, binary cross-entropy per label, micro/macro-F1
and exact match instead of accuracy, and the refusals of what means one label per text."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from attnserve.export.parity import torch_threads
from attnserve.training.cli.main import main
from attnserve.training.data import DataError, Layout, Part, load_file, load_parts
from attnserve.training.data.core import TAGGED
from attnserve.training.distill.teacher import TeacherError, load_teacher
from attnserve.training.loop.batching import Split, batch_tensors
from attnserve.training.loop.step import accumulate_gradients
from attnserve.training.loop.trainer import TrainConfig
from attnserve.training.models import build_model
from attnserve.training.report.multi_label import label_report, micro_f1, multi_score
from attnserve.training.run.checkpoint import EVAL_SET, METRICS, load_run
from attnserve.training.run.pipeline import DataSpec, train_run
from tests.support.runs import TINY

# Each label has its own words: a text carries the labels whose words it holds (or none).
TOPICS = {
    "politics": ("vote", "senate", "law"),
    "sports": ("goal", "match", "team"),
    "tech": ("code", "chip"),
}
FILLER = ("the", "a", "today", "news", "about", "story", "people")
FAMILIES = sorted(TINY)


def topic_rows(n: int, seed: int = 0, topics: dict[str, tuple[str, ...]] = TOPICS) -> list[dict[str, str]]:
    """``n`` rows ``{"text", "label"}``: filler words and the words of each label drawn (40% each)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        labels = [name for name in topics if rng.random() < 0.4]
        words = [rng.choice(FILLER) for _ in range(3)] + [rng.choice(topics[name]) for name in labels]
        rng.shuffle(words)
        rows.append({"text": " ".join(words), "label": "|".join(labels)})
    return rows


def write_topics(path: Path, n: int = 160, seed: int = 0, **topics: tuple[str, ...]) -> Path:
    """A CSV of ``topic_rows`` (an empty label cell: a text with no label)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["text", "label"])
        writer.writeheader()
        writer.writerows(topic_rows(n, seed, topics or TOPICS))
    return path


def test_label_cells_split_into_the_sorted_union_of_the_training_labels(tmp_path: Path) -> None:
    rows = [{"text": "vote goal", "label": "sports | politics"}, {"text": "the", "label": ""}]
    rows += [{"text": f"code {i}", "label": "tech"} for i in range(18)]
    path = tmp_path / "d.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["text", "label"])
        writer.writeheader()
        writer.writerows(rows)
    ds = load_file(path, multi_label=True, val_fraction=0.1, test_fraction=0.0)
    assert ds.multi_label and ds.labels == ("politics", "sports", "tech")
    by_text = {ex.text: ex for ex in ds.train + ds.val}
    assert by_text["vote goal"].tags == (0, 1) and by_text["vote goal"].label == TAGGED
    assert by_text["the"].tags == ()  # an empty cell: no label, not a missing one
    # JSON lists and another separator read the same; --labels fixes the names and their order.
    lines = tmp_path / "d.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in [{"text": "a b", "label": ["b", "a"]}] * 10))
    assert load_file(lines, multi_label=True).labels == ("a", "b")
    semi = tmp_path / "semi.csv"
    semi.write_text("text,label\n" + "x y,b;a\n" * 10, encoding="utf-8")
    fixed = load_file(semi, multi_label=True, separator=";", labels=("b", "a"))
    assert fixed.labels == ("b", "a") and fixed.train[0].tags == (0, 1)


def test_a_label_the_training_part_never_has_is_refused_by_name(tmp_path: Path) -> None:
    train = write_topics(tmp_path / "train.csv", 40)
    val = write_topics(tmp_path / "val.csv", 20, seed=1, weather=("rain",), tech=("code",))
    layout = Layout(multi_label=True)
    with pytest.raises(DataError, match=r"val\.csv: label\(s\) \['weather'\].*not among the labels of the "):
        load_parts(Part(str(train)), val=Part(str(val)), layout=layout)
    one = tmp_path / "one.csv"
    one.write_text("text,label\n" + "vote,politics\n" * 10, encoding="utf-8")
    with pytest.raises(DataError, match="needs at least 2 different labels"):
        load_file(one, multi_label=True)
    with pytest.raises(DataError, match="built-in task car-order is single-label"):
        DataSpec(task="car-order", multi_label=True)
    with pytest.raises(DataError, match="--ordinal ranks one label per text"):
        DataSpec(path=str(train), multi_label=True, ordinal=True)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ([], "--multi-label reads your own data (--data); the built-in task car-order is single-label"),
        (["--data", "D", "--class-weights", "balanced"], "--class-weights balanced weighs classes"),
        (["--data", "D", "--select-by", "accuracy"], "--select-by accuracy has no multi-label meaning"),
        (["distill", "--data", "D", "--teacher", "T"], "it does not distill multi-label data"),
        (["tune", "--data", "D"], "--multi-label runs report no accuracy: tune them with --metric macro_f1"),
    ],
)
def test_what_means_one_label_per_text_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    (tmp_path / "checkpoint.pt").write_bytes(b"")  # --teacher must name a run folder
    swap = {"D": str(write_topics(tmp_path / "d.csv", 40)), "T": str(tmp_path)}
    argv = [
        *(swap.get(f, f) for f in flags),
        "--multi-label",
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
    ]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_figures_count_label_cells() -> None:
    targets = np.array([[1, 0, 1], [0, 1, 0], [0, 0, 0], [1, 1, 0]], dtype=np.float32)
    probs = np.array([[0.9, 0.2, 0.6], [0.1, 0.4, 0.0], [0.7, 0.1, 0.2], [0.8, 0.9, 0.1]], dtype=np.float32)
    scores = multi_score(targets, probs, loss=0.25)
    # tp 4 (a,c of row 0; a,b of row 3), fp 1 (row 2's a), fn 1 (row 1's b): 8 / (8 + 2)
    assert scores.micro_f1 == pytest.approx(0.8)
    assert scores.macro_f1 == pytest.approx((2 * 2 / 5 + 2 * 1 / 3 + 1.0) / 3)
    assert scores.exact_match == pytest.approx(0.5) and scores.n == 4
    report = label_report(targets, probs, ["a", "b", "c"])
    assert report["per_label"]["b"] == {
        "precision": 1.0,
        "recall": 0.5,
        "f1": 2 / 3,
        "support": 2,
        "predicted": 1,
    }
    assert report["texts_without_labels"] == 1
    assert micro_f1(np.zeros((2, 3)), np.zeros((2, 3), dtype=bool)) == 1.0  # nothing to find, nothing found


def test_the_loss_is_bce_with_logits_and_micro_batches_add_up_to_the_batch() -> None:
    torch.manual_seed(0)
    model = build_model("bow_mlp", {"vocab_size": 30, "num_classes": 3, "max_len": 16, "hidden": 8})
    model.eval()  # no dropout: every pass computes the same logits
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 16, size=12).astype(np.int32)
    ids = np.where(np.arange(16)[None, :] < lengths[:, None], rng.integers(3, 30, size=(12, 16)), 0)
    split = Split(ids.astype(np.int32), lengths, rng.integers(0, 2, size=(12, 3)).astype(np.float32))
    batch = batch_tensors(split, np.arange(12), torch.device("cpu"))
    assert batch[2].dtype == torch.float32 and batch[2].shape == (12, 3)
    grads = []
    for tokens in (0, 40):  # whole, then micro-batches of at most 40 padded tokens
        model.zero_grad()
        loss, _ = accumulate_gradients(model, batch, TrainConfig(max_batch_tokens=tokens))
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
        with torch.no_grad():
            expected = torch.nn.BCEWithLogitsLoss()(model.logits(batch[0], batch[1]), batch[2])
        assert loss == pytest.approx(float(expected), abs=1e-6)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-5)


def test_a_tiny_run_reports_micro_and_macro_f1_and_exact_match(tmp_path: Path) -> None:
    data = write_topics(tmp_path / "topics.csv", 200)
    out = tmp_path / "run"
    argv = ["--data", str(data), "--multi-label", "--model", "attention_pool", "--d-model", "16",
            "--lr", "0.03", "--epochs", "12", "--batch-size", "16", "--threads", "1", "--no-progress",
            "--out", str(out)]  # fmt: skip
    with torch_threads(1):
        assert main(argv) == 0
    metrics = json.loads((out / METRICS).read_text())
    assert metrics["multi_label"] and metrics["select_by"] == "micro_f1"
    assert metrics["labels"] == ["politics", "sports", "tech"]
    for split in ("val", "test"):
        assert {"micro_f1", "macro_f1", "exact_match", "loss"} <= set(metrics[split])
        assert "accuracy" not in metrics[split]
    assert metrics["val"]["micro_f1"] > 0.8  # the words decide the labels
    assert {"val_micro_f1", "val_macro_f1", "val_exact_match", "train_exact_match"} <= set(
        metrics["history"][0]
    )
    assert set(metrics["data"]["train_classes"]) == {"politics", "sports", "tech"}
    report = json.loads((out / "report.json").read_text())
    assert (
        set(report["val"]["per_label"]) == {"politics", "sports", "tech"} and "confusion" not in report["val"]
    )
    rows = [json.loads(line) for line in (out / EVAL_SET).read_text().splitlines()]
    assert all(set(row) == {"text", "labels"} for row in rows) and any(not row["labels"] for row in rows)
    run = load_run(out)
    assert run.multi_label and not (out / "confusion.png").exists() and (out / "curves.png").is_file()
    with pytest.raises(TeacherError, match="is a multi-label run"):  # a single-label student's teacher
        load_teacher(out)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_that_trains_from_scratch_learns_sigmoids(tmp_path: Path, family: str) -> None:
    data = write_topics(tmp_path / "topics.csv", 80)
    with torch_threads(1):
        result = train_run(
            tmp_path / "run",
            family,
            TINY[family],
            TrainConfig(epochs=2, batch_size=16, progress=False, seed=0, select_by="micro_f1", threads=1),
            DataSpec(path=str(data), multi_label=True, seed=0),
        )
    val: dict[str, Any] = result.metrics["val"]
    assert 0.0 <= val["micro_f1"] <= 1.0 and np.isfinite(val["loss"]) and "accuracy" not in val
    assert load_run(result.run_dir).model.config.num_classes == 3


def test_a_pretrained_encoder_fine_tunes_on_multi_label_data(tmp_path: Path) -> None:
    from tests.support.tiny_bert import GOOD, make_tiny_bert

    checkpoint = make_tiny_bert(tmp_path)
    # The tiny BERT's own words: each noun a label, adjectives as filler.
    data = write_topics(tmp_path / "reviews.csv", 60, film=("film",), plot=("plot",), music=("music",))
    text = data.read_text(encoding="utf-8").replace("today", GOOD[0])
    data.write_text(text, encoding="utf-8")
    with torch_threads(1):
        result = train_run(
            tmp_path / "run",
            "encoder",
            {},
            TrainConfig(
                epochs=1, batch_size=16, lr=3e-3, progress=False, seed=0, threads=1, word_dropout=0.0
            ),
            DataSpec(path=str(data), multi_label=True, seed=0),
            pretrained=str(checkpoint),
        )
    assert result.metrics["multi_label"] and result.metrics["labels"] == ["film", "music", "plot"]
    assert {"micro_f1", "macro_f1", "exact_match"} <= set(result.metrics["val"])
