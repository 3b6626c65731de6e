"""`attnserve-train --long-texts windows` end to end: a small family trained on whole long texts
cut into windows, exported with `attnserve-export RUN` (no long-text flag: the run's policy)
and served by a real server with `--long-text windows`.

A document is 30 to 60 filler words with one cue word ("good" or "bad") placed after the
20th word, past the first window of 16 tokens, and labelled by it: the first window alone
cannot tell, the windows together can. A few documents are far longer than --max-windows
allows and are skipped, as a server refuses them.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from tokenizers import Tokenizer

from attnserve.export.calibration import RowsName
from attnserve.export.cli import main as export_main
from attnserve.export.evalset import EvalSet
from attnserve.export.long_text_calibration import window_calibration
from attnserve.export.parity import torch_threads
from attnserve.service.bundle import LongTexts, read_bundle, softmax
from attnserve.service.client import Client
from attnserve.training.cli.main import main as train_main
from attnserve.training.long_texts.fold import fold, window_logits
from attnserve.training.long_texts.record import LONG_TEXTS_FILE, recorded_policy
from attnserve.training.long_texts.windows import Documents, cut_texts, documents, pack, window_tokenizer
from attnserve.training.run.checkpoint import load_run
from tests.support.long_texts import served_tokenizer, write_csv
from tests.support.servers import RunningServer, make_settings
from tests.support.tiny_bert import make_tiny_bert

WINDOW = 16
NAME = "long-cues"
FILL = ("the", "a", "film", "story", "scene", "actor", "plot", "music", "then", "and", "it", "was", "very")
TOO_LONG = 3  # training documents over --max-windows


def document(rng: random.Random, words: tuple[int, int] = (30, 60)) -> tuple[str, str]:
    positive = rng.random() < 0.5
    n = rng.randint(*words)
    parts = [rng.choice(FILL) for _ in range(n)]
    parts.insert(rng.randint(20, n), "good" if positive else "bad")
    return " ".join(parts), "positive" if positive else "negative"


def texts_of(path: Path) -> list[str]:
    with open(path, newline="", encoding="utf-8") as handle:
        return [row["text"] for row in csv.DictReader(handle)]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root, rng = tmp_path_factory.mktemp("long-cues"), random.Random(0)
    train = [document(rng) for _ in range(300)] + [document(rng, (400, 420)) for _ in range(TOO_LONG)]
    return {
        "train": write_csv(root / "train.csv", train),
        "valid": write_csv(root / "valid.csv", [document(rng) for _ in range(60)]),
        "test": write_csv(root / "test.csv", [document(rng) for _ in range(40)]),
    }


@pytest.fixture(scope="module")
def run(data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run")
    argv = [
        "--data", str(data["train"]), "--val-data", str(data["valid"]), "--test-data", str(data["test"]),
        "--long-texts", "windows", "--window", str(WINDOW), "--model", "attention_pool", "--d-model", "16",
        "--epochs", "8", "--lr", "0.01", "--threads", "1", "--step-tokens", "1024", "--out", str(out),
    ]  # fmt: skip
    with torch_threads(1):
        assert train_main(argv) == 0
    return out


@pytest.fixture(scope="module")
def bundle(run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("models")
    argv = [str(run), "--repository", str(repository), "--name", NAME, "--quantize", "none", "--no-latency"]
    assert export_main(argv) == 0
    return repository / NAME / "1"


def trained_documents(run: Path, policy: LongTexts, texts: list[str], pad_id: int = 0) -> Documents:
    """`texts` as the trainer reads them (labels aside)."""
    cutter = window_tokenizer(run / "tokenizer.json", WINDOW, "head", policy)
    return documents(cutter, texts, [0] * len(texts), policy.max_windows, pad_id)


def test_the_run_records_the_policy_chosen_on_validation_and_export_writes_it(
    run: Path, bundle: Path
) -> None:
    policy = recorded_policy(run)
    assert policy is not None and (policy.window, policy.stride, policy.max_windows) == (WINDOW, 3, 16)
    metrics = json.loads((run / "metrics.json").read_text())
    assert [row["epoch"] for row in metrics["history"]] == list(range(1, 9))  # a validation per epoch
    validation = metrics["long_texts"]["readings"]["val"]
    assert policy.chosen == validation and set(validation) == {"truncate", "mean", "max"}
    assert policy.combine == ("max" if validation["max"] > validation["mean"] else "mean")
    # The cue lies past the first window: the windows read together decide, the first alone cannot.
    assert validation[policy.combine] >= 0.95 and validation["truncate"] < 0.8
    assert metrics["test"]["accuracy"] == metrics["long_texts"]["readings"]["test"][policy.combine]
    texts = metrics["long_texts"]["texts"]
    assert texts["train"]["skipped"] == TOO_LONG and texts["train"]["texts"] == 300
    assert any("3 of 303 texts skipped" in w for w in metrics["warnings"])
    manifest = read_bundle(bundle).manifest
    assert manifest.long_texts == policy
    # The temperature is fitted on the validation texts read as the policy reads them: here every one
    # is right, which places none (their first windows alone, mostly wrong, would have placed one).
    calibration = manifest.calibration
    assert calibration is None or calibration.accuracy == pytest.approx(validation[policy.combine])


def test_training_windows_are_the_servers_windows(run: Path, bundle: Path, data: dict[str, Path]) -> None:
    policy = recorded_policy(run)
    assert policy is not None
    texts = texts_of(data["train"])[:50] + texts_of(data["test"])
    trained = cut_texts(window_tokenizer(run / "tokenizer.json", WINDOW, "head", policy), texts)
    served, _ = served_tokenizer(bundle, policy).encode_windows(texts)
    assert trained == [[list(e.ids) for e in each] for each in served]
    assert all(each is not None and len(each) >= 3 for each in trained)


def test_the_served_answer_is_the_trainers_fold(run: Path, bundle: Path, data: dict[str, Path]) -> None:
    policy = recorded_policy(run)
    assert policy is not None
    texts = texts_of(data["test"])[:8]
    loaded = load_run(run)
    docs = trained_documents(run, policy, texts, loaded.pad_id)
    with torch_threads(1):
        logits = window_logits(loaded.model, docs, torch.device("cpu"), 4096)
    folded = fold(logits, docs, policy)[policy.combine]
    manifest = read_bundle(bundle).manifest
    temperature = manifest.calibration.temperature if manifest.calibration else 1.0
    with (
        RunningServer(make_settings(bundle.parent.parent, long_text="windows")) as server,
        Client(server.target) as client,
    ):
        results = client.classify(texts, model=NAME).results
    starts = docs.starts
    for i, result in enumerate(results):
        own = logits[starts[i] : starts[i] + docs.counts[i]]
        assert len(result.windows) == len(own)
        np.testing.assert_allclose(
            [w.probabilities for w in result.windows], softmax(own, temperature), atol=1e-4
        )
        expected = softmax(folded[i : i + 1], temperature)[0]
        np.testing.assert_allclose(result.probabilities, expected, atol=1e-4)
        assert result.label == manifest.labels[int(folded[i].argmax())]


def test_packed_steps_hold_whole_texts_within_the_budget(run: Path, data: dict[str, Path]) -> None:
    policy = recorded_policy(run)
    assert policy is not None
    texts = texts_of(data["train"])
    docs = trained_documents(run, policy, texts)
    steps = pack(docs, np.random.default_rng(0).permutation(len(docs)), 200)
    assert sorted(np.concatenate(steps).tolist()) == list(range(len(docs)))
    for step in steps:
        windows = int(docs.counts[step].sum())
        assert windows * WINDOW <= 200 or len(step) == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--long-texts", "windows", "--window", "8", "--stride", "6"], "stride 6 must be under"),
        (["--long-texts", "windows", "--multi-label"], "does not take --multi-label"),
        (["--window", "8"], "--window need --long-texts windows"),
        (["--long-texts", "windows", "--window", "4096", "--max-len", "16"], "over the model's max_len 16"),
    ],
)
def test_settings_that_cannot_work_are_refused(
    data: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    out = tmp_path / "r"
    argv = ["--data", str(data["valid"]), "--model", "mean_pool", "--epochs", "1", "--out", str(out)]
    assert train_main([*argv, *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (out / LONG_TEXTS_FILE).exists()


def test_the_temperature_is_fitted_on_the_texts_read_as_windows(
    run: Path, bundle: Path, data: dict[str, Path]
) -> None:
    policy = recorded_policy(run)
    assert policy is not None
    texts = texts_of(data["valid"])
    manifest = read_bundle(bundle).manifest
    with open(data["valid"], newline="", encoding="utf-8") as handle:
        labels = np.asarray([manifest.labels.index(row["label"]) for row in csv.DictReader(handle)], np.int64)
    labels[::6] = 1 - labels[::6]  # some wrong: a temperature has something to place
    session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    named = RowsName(file="valid.csv", split="validation", sha256="0" * 64)
    rows = EvalSet(texts, labels)
    calibration = window_calibration(
        session, bundle / "tokenizer.json", rows, named, manifest.max_len, manifest.truncation, policy, 0
    )
    loaded = load_run(run)
    docs = trained_documents(run, policy, texts, loaded.pad_id)
    with torch_threads(1):
        folded = fold(window_logits(loaded.model, docs, torch.device("cpu"), 4096), docs, policy)[
            policy.combine
        ]
    assert calibration is not None and calibration.rows == len(texts)
    assert calibration.accuracy == pytest.approx(float((folded.argmax(axis=1) == labels).mean()))


def test_a_pretrained_encoder_trains_on_windows_with_its_special_tokens(
    data: dict[str, Path], tmp_path: Path
) -> None:
    checkpoint = make_tiny_bert(tmp_path)
    out = tmp_path / "run"
    argv = [
        "--data", str(data["valid"]), "--pretrained", str(checkpoint), "--long-texts", "windows",
        "--window", "24", "--epochs", "1", "--threads", "1", "--out", str(out),
    ]  # fmt: skip
    with torch_threads(1):
        assert train_main(argv) == 0
    policy = recorded_policy(out)
    assert policy is not None and (policy.window, policy.stride) == (24, 5)
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    windows = cut_texts(window_tokenizer(out / "tokenizer.json", 24, "head", policy), texts_of(data["valid"]))
    assert all(w[0] == cls and w[-1] == sep and len(w) <= 24 for each in windows for w in each or [])


def test_a_run_out_of_time_validates_its_last_steps_and_records_a_policy(
    data: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    argv = [
        "--data", str(data["valid"]), "--long-texts", "windows", "--window", str(WINDOW), "--model",
        "mean_pool", "--epochs", "50", "--patience", "100", "--max-seconds", "0.1", "--plan-to-budget",
        "--threads", "1",
        "--out", str(out),
    ]  # fmt: skip
    with torch_threads(1):
        assert train_main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["epochs_run"] < 50  # the budget's plan ended the run, or the budget itself
    assert metrics["history"][-1]["step"] == metrics["steps"]  # the last steps were validated
    assert recorded_policy(out) is not None
