"""`attnserve-export --to-hf RUN OUT`: an encoder run as a Hugging Face folder, checked by transformers.

A tiny BERT fine-tuned through the real training entry point (`--pretrained`) is written with
the command line, loaded with transformers' Auto classes as a user would (default attention,
no attnserve code) and compared with the run's own model and tokenizer on its validation
texts and a text cut at max_len. The folder then goes back through `attnserve-export OUT`
(the Hugging Face import) into a bundle whose golden logits are the run's. Every head layout
(tanh, ReLU, GELU) is checked on untrained encoders of each mapped model type, saved as
runs by the real checkpoint writer. Refusals exit 2 and a failed proof exits 1, writing
nothing.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from transformers import AutoConfig

from attnserve.export import to_hf
from attnserve.export.cli import main
from attnserve.export.evalset import load_bundle_tokenizer, read_eval_set
from attnserve.export.parity import DEFAULT_TOLERANCE, torch_threads
from attnserve.export.to_hf_model import HEADS, build_classifier
from attnserve.service.bundle import read_bundle
from attnserve.training.models.encoder import EncoderClassifier, EncoderConfig
from attnserve.training.run.checkpoint import LoadedRun, load_run, save_checkpoint
from attnserve.training.text.tokenizer import encode_batch
from tests.export.hf_classifiers import ARCHITECTURES, POSITIONS, save_classifier, texts
from tests.support.tiny_bert import shared_tiny_encoder_run, train_tiny_encoder_run

LONG_TEXT = "The plot was dull, and the music was lovely. " * 40  # far past max_len


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    with torch_threads(1):  # tiny models: extra threads only add contention
        yield


@pytest.fixture(scope="module")
def encoder_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_tiny_encoder_run(tmp_path_factory)


@pytest.fixture(scope="module")
def hf_folder(encoder_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("to-hf") / "tiny-bert-reviews"
    assert main([to_hf.TO_HF_FLAG, str(encoder_run), str(out)]) == 0
    return out


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def _compare(run: LoadedRun, folder: Path, cases: list[str]) -> int:
    """Assert transformers' ids and logits on ``folder`` are the run's; return how many texts
    the run's tokenizer cut at max_len (those are checked at exactly max_len tokens)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    assert json.loads((folder / "config.json").read_text())["architectures"] == [type(model).__name__]
    ours = load_bundle_tokenizer(run.tokenizer_path)
    side = "tail" if run.truncation == "tail" else "head"
    batch = tokenizer(cases, padding=True, truncation=True, return_tensors="pt")
    with torch.inference_mode():
        theirs = model(**batch).logits  # [N, C]
    cut = 0
    for row, text in enumerate(cases):
        encoded = encode_batch(ours, [text], run.max_len, side)  # [1, T], as the run reads it
        ids = torch.from_numpy(encoded.input_ids)
        width = int(batch["attention_mask"][row].sum())
        assert batch["input_ids"][row, :width].tolist() == ids[0].tolist(), text
        if encoded.truncated[0]:
            assert width == run.max_len
            cut += 1
        with torch.inference_mode():
            expected = run.model.logits(ids, torch.from_numpy(encoded.attention_mask))[0]
        torch.testing.assert_close(theirs[row], expected, atol=DEFAULT_TOLERANCE, rtol=0)
    return cut


def test_an_encoder_run_loads_in_transformers_and_gives_the_runs_logits(
    encoder_run: Path, hf_folder: Path
) -> None:
    names = {p.name for p in hf_folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    assert "special_tokens_map.json" in names and "pytorch_model.bin" not in names
    run = load_run(encoder_run)
    config = json.loads((hf_folder / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {str(i): label for i, label in enumerate(run.labels)}
    assert config["label2id"] == {label: i for i, label in enumerate(run.labels)}
    assert config["problem_type"] == "single_label_classification"
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_folder)
    assert (tokenizer.pad_token, tokenizer.cls_token, tokenizer.model_max_length) == (
        "[PAD]",
        "[CLS]",
        run.max_len,
    )
    assert run.eval_path is not None
    cases = [*read_eval_set(run.eval_path, len(run.labels)).texts[:8], "zebra!", LONG_TEXT]
    assert _compare(run, hf_folder, cases) >= 1  # the long text, at exactly max_len tokens


def test_the_command_prints_each_step_and_its_figures(
    encoder_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([to_hf.TO_HF_FLAG, str(encoder_run), str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert f"read {encoder_run}: encoder (bert), 2 labels" in out
    assert "wrote config.json (BertForSequenceClassification)" in out
    assert "logits max |Δ|" in out and f"cut at max_len {load_run(encoder_run).max_len}" in out
    assert f"wrote {tmp_path / 'out'}: config.json" in out
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging folder left behind


def test_the_folder_imports_back_into_a_bundle_with_the_runs_golden_logits(
    encoder_run: Path, hf_folder: Path, tmp_path: Path
) -> None:
    repository = tmp_path / "models"
    assert main([str(hf_folder), "--repository", str(repository), "--name", "back", "--no-latency"]) == 0
    manifest = read_bundle(repository / "back" / "1").manifest
    run = load_run(encoder_run)
    assert (manifest.labels, manifest.max_len, manifest.truncation) == (run.labels, run.max_len, "head")
    assert manifest.golden
    ours = load_bundle_tokenizer(run.tokenizer_path)
    for case in manifest.golden:
        encoded = encode_batch(ours, [case.text], run.max_len, "head")
        assert case.input_ids == encoded.input_ids[0].tolist()
        with torch.inference_mode():
            expected = run.model.logits(
                torch.from_numpy(encoded.input_ids), torch.from_numpy(encoded.attention_mask)
            )[0]
        torch.testing.assert_close(torch.tensor(case.logits), expected, atol=DEFAULT_TOLERANCE, rtol=0)


def _untrained_run(root: Path, model_type: str, truncation: str) -> Path:
    """A run folder of ``model_type`` as the checkpoint writer saves one: a random encoder with
    random LayerNorms (a bound far from 1) and head, and the architecture's own tokenizer."""
    arch = ARCHITECTURES[model_type]
    folder = save_classifier(arch, root / f"hf-{model_type}")
    encoder: dict[str, Any] = AutoConfig.from_pretrained(folder).to_dict()
    encoder["model_type"] = model_type
    pad_id = int(encoder["pad_token_id"])
    torch.manual_seed(1)
    config = EncoderConfig(
        num_classes=len(arch.labels), max_len=POSITIONS - 2, pad_id=pad_id, encoder=encoder
    )
    model = EncoderClassifier(config).eval()
    with torch.no_grad():
        for norm in (m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)):
            norm.weight.uniform_(0.5, 3.0)
            norm.bias.normal_()
        model.classifier.weight.normal_(std=0.5)
    run_dir = root / f"run-{model_type}"
    run_dir.mkdir()
    save_checkpoint(run_dir, model, labels=list(arch.labels), task="test", metrics={}, truncation=truncation)
    shutil.copy(folder / "tokenizer.json", run_dir / "tokenizer.json")
    return run_dir


@pytest.mark.parametrize("model_type", sorted(HEADS))
def test_every_mapped_head_computes_the_runs_logits(model_type: str, tmp_path: Path) -> None:
    truncation = "tail" if model_type == "roberta" else "head"  # one run cuts the start of a long text
    run_dir = _untrained_run(tmp_path, model_type, truncation)
    proven = to_hf.write_hf_folder(run_dir, tmp_path / "out", say=lambda line: None)
    assert proven.max_abs_diff <= DEFAULT_TOLERANCE and proven.cut_at_max_len >= 1
    assert _compare(load_run(run_dir), tmp_path / "out", [*texts(6, seed=2), LONG_TEXT]) == 1


def test_runs_of_the_small_families_are_refused(
    trained_run: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for family in ("gru_attention", "bow_mlp"):
        assert main([to_hf.TO_HF_FLAG, str(trained_run(family)), str(tmp_path / "out")]) == 2
        line = _error_line(capsys)
        assert line.startswith("attnserve-export: error: ")
        assert f"is a {family} run, which has no Hugging Face equivalent" in line
        assert "attnserve-train --pretrained" in line
    assert not (tmp_path / "out").exists()


def test_an_attention_head_run_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = train_tiny_encoder_run(tmp_path, head="attention", epochs=1)
    assert main([to_hf.TO_HF_FLAG, str(run), str(tmp_path / "out")]) == 2
    assert "--encoder-head attention" in _error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_a_folder_with_files_is_replaced_only_with_overwrite(
    encoder_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main([to_hf.TO_HF_FLAG, str(encoder_run), str(out)]) == 2
    assert f"{out} is not empty; pass --overwrite to replace it" in _error_line(capsys)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert main([to_hf.TO_HF_FLAG, str(encoder_run), str(out), "--overwrite"]) == 0
    assert not (out / "notes.txt").exists() and (out / "model.safetensors").is_file()
    assert main([to_hf.TO_HF_FLAG, str(encoder_run), str(encoder_run.parent), "--overwrite"]) == 2
    assert "holds the run" in _error_line(capsys)


def test_a_folder_whose_logits_differ_fails_and_writes_nothing(
    encoder_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def off_by_a_little(run: LoadedRun) -> Any:
        classifier = build_classifier(run)
        with torch.no_grad():
            classifier.classifier.bias += 1e-3  # a head the proof must catch
        return classifier

    monkeypatch.setattr(to_hf, "build_classifier", off_by_a_little)
    assert main([to_hf.TO_HF_FLAG, str(encoder_run), str(tmp_path / "out")]) == 1
    line = _error_line(capsys)
    assert line.startswith("attnserve-export: export failed: transformers' logits differ from the run's by")
    assert "nothing was written" in line
    assert list(tmp_path.iterdir()) == []  # neither OUT nor the staging folder
