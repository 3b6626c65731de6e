"""`attnserve-export FOLDER` on a Hugging Face sequence-classifier folder, for every supported
architecture: exported through the command line, then loaded as the server loads a version
(bundle reader, golden checks, onnxruntime) and compared with transformers itself: the ids
of transformers' tokenizer, softmax of its logits, its output_attentions, id2label's order.
Refusals exit 2 naming the reason, and publish nothing.
"""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers
from prometheus_client import CollectorRegistry

from attnserve.export.cli import main
from attnserve.export.hf_import import GOLDEN_TEXTS
from attnserve.export.parity import DEFAULT_TOLERANCE, torch_threads
from attnserve.service.bundle import label_tolerance, read_bundle, softmax
from attnserve.service.engine.metrics import Metrics
from attnserve.service.engine.models.loading import LoadedModel, load_model
from attnserve.service.engine.models.runtime import pad_ids
from tests.export.hf_classifiers import ARCHITECTURES, POSITIONS, keep_slow_files, save_classifier, texts
from tests.support.servers import make_settings

OFFSET = {"roberta": 2, "xlm-roberta": 2, "mpnet": 2}  # position tables that start after the pad id
ATOL = 1e-5


@dataclass(frozen=True)
class Imported:
    arch: str
    folder: Path
    bundle: Path
    served: LoadedModel
    tokenizer: Any  # transformers' AutoTokenizer of the folder
    model: Any  # transformers' AutoModelForSequenceClassification of the folder (eager, eval)
    default: Any  # the same as users load it: transformers' default attention (sdpa where it has one)


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    with torch_threads(1):  # tiny models: extra threads only add contention
        yield


def _export(folder: Path, repository: Path, name: str, *extra: str) -> int:
    return main([str(folder), "--repository", str(repository), "--name", name, *extra])


def _serve(bundle: Path, name: str) -> LoadedModel:
    settings = make_settings(bundle.parent.parent)
    return load_model(bundle, settings, Metrics(CollectorRegistry()), name=name, version=1)


def _reference(folder: Path) -> tuple[Any, Any]:
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        folder, attn_implementation="eager"
    )
    return tokenizer, model.eval()


def _write_rows(path: Path, model: Any, tokenizer: Any, labels: tuple[str, ...]) -> Path:
    """40 texts labelled by the model's own predictions, label names as written by a person."""
    rows = texts(40, seed=1)
    with torch.inference_mode():
        encoded = tokenizer(
            rows, padding=True, truncation=True, max_length=POSITIONS - 2, return_tensors="pt"
        )
        predicted = model(**encoded).logits.argmax(-1).tolist()
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows((text, labels[i]) for text, i in zip(rows, predicted, strict=True))
    return path


@pytest.fixture(scope="module", params=sorted(ARCHITECTURES))
def imported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Imported:
    """The architecture's folder exported with --rows (so its label graph may be int8) and
    loaded as the server loads it."""
    arch = ARCHITECTURES[request.param]
    root = tmp_path_factory.mktemp(arch.name)
    folder = save_classifier(arch, root / "classifier")
    tokenizer, model = _reference(folder)
    rows = _write_rows(root / "rows.csv", model, tokenizer, arch.labels)
    # Random weights: the labels carry no signal, so int8 is accepted whatever it does to
    # accuracy; the gate's figures are still measured and recorded.
    drop = ("--max-accuracy-drop", "100")
    assert _export(folder, root / "models", "m", "--rows", str(rows), *drop, "--no-latency") == 0
    bundle = root / "models" / "m" / "1"
    default = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    return Imported(arch.name, folder, bundle, _serve(bundle, "m"), tokenizer, model, default)


def _alone(model: Any, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """transformers' logits [C] and attentions [L, H, n, n] for one text, unpadded."""
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    return out.logits[0].numpy(), torch.stack(out.attentions, dim=1)[0].numpy()


def test_the_manifest_is_an_encoder_bundle_with_the_models_labels(imported: Imported) -> None:
    manifest = read_bundle(imported.bundle).manifest
    hf = imported.model.config
    assert manifest.family == "encoder"
    assert (
        manifest.labels
        == [hf.id2label[i] for i in range(hf.num_labels)]
        == list(ARCHITECTURES[imported.arch].labels)
    )
    assert manifest.max_len == POSITIONS - OFFSET.get(imported.arch, 0)
    assert manifest.pad_id == imported.tokenizer.pad_token_id
    spec = manifest.attention
    assert (spec.kind, spec.layers, spec.heads) == ("layers", 2, hf.num_attention_heads)
    shapes = {s.name: s.shape for s in manifest.outputs}
    assert shapes == {
        "logits": ["batch", hf.num_labels],
        "attention": ["batch", 2, spec.heads, "sequence", "sequence"],
    }
    assert manifest.parity is not None and manifest.parity.logits_max_abs_diff <= DEFAULT_TOLERANCE
    assert manifest.parity.attention_max_abs_diff is not None
    assert manifest.parity.attention_max_abs_diff <= DEFAULT_TOLERANCE
    assert manifest.calibration is None  # served as softmax(logits), transformers' own scores
    assert manifest.training_metrics["source"]["architecture"] == hf.architectures[0]  # type: ignore[index]
    # The label graph is int8, gated on the rows given with --rows.
    assert manifest.label_graph is not None and manifest.label_graph.quantization is not None
    gate = manifest.label_graph.quantization.rows
    assert gate is not None and (gate.file, gate.split, gate.rows) == ("rows.csv", "rows", 40)
    assert (manifest.data_profile is not None) == ("[UNK]" in imported.tokenizer.get_vocab())
    # Golden cases: texts of the rows, with transformers' own outputs.
    assert len(manifest.golden) == 4
    for case in manifest.golden:
        ids = imported.tokenizer(case.text, truncation=True, max_length=manifest.max_len)["input_ids"]
        assert case.input_ids == ids
        logits, attention = _alone(imported.model, ids)
        np.testing.assert_allclose(case.logits, logits, atol=ATOL)
        expected = case.attention_array()
        assert expected is not None
        np.testing.assert_allclose(expected, attention, atol=ATOL)


def test_served_scores_and_attention_are_transformers(imported: Imported) -> None:
    served = imported.served
    max_len = served.manifest.max_len
    long_text = " ".join(texts(40, seed=3))  # far past max_len: cut to it, as transformers cuts it
    batch = [*texts(5, seed=2), long_text]
    encoded = served.tokenizer.encode(batch)
    assert encoded.lengths[-1] == max_len and encoded.truncated == [False] * 5 + [True]
    ids, mask = pad_ids(encoded.ids, served.manifest.pad_id)  # one padded batch, as the batcher runs it
    logits, attention = served.runtime.run(ids, mask, True)
    (label_logits,) = served.session_for(attention=False).run(ids, mask, False)
    tolerance = label_tolerance(served.manifest, DEFAULT_TOLERANCE)
    for row, text in enumerate(batch):
        expected_ids = imported.tokenizer(text, truncation=True, max_length=max_len)["input_ids"]
        n = len(expected_ids)
        assert list(encoded.ids[row]) == expected_ids
        reference_logits, reference_attention = _alone(imported.model, expected_ids)
        with torch.inference_mode():  # the scores as users get them, attention as transformers defaults
            scores = imported.default(input_ids=torch.tensor([expected_ids])).logits.softmax(-1)[0].numpy()
        np.testing.assert_allclose(softmax(logits[row : row + 1], served.temperature)[0], scores, atol=ATOL)
        np.testing.assert_allclose(attention[row, :, :, :n, :n], reference_attention, atol=ATOL)
        assert not attention[row, :, :, n:].any() and not attention[row, :, :, :, n:].any()
        assert np.abs(label_logits[row] - reference_logits).max() <= tolerance
        assert (
            served.labels[int(logits[row].argmax())]
            == imported.model.config.id2label[int(reference_logits.argmax())]
        )


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_classifier(ARCHITECTURES["bert"], tmp_path_factory.mktemp("bert") / "classifier")


def test_without_rows_the_graphs_stay_float32_and_the_golden_texts_are_built_in(
    bert_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _export(bert_folder, tmp_path, "plain", "--max-len", "24") == 0  # with the latency report
    out = capsys.readouterr().out
    assert "golden cases match" in out and "onnxruntime speed-up" in out
    manifest = read_bundle(tmp_path / "plain" / "1").manifest
    assert manifest.max_len == 24
    assert manifest.label_graph is not None and manifest.label_graph.quantization is None
    assert manifest.quantization is None and manifest.data_profile is None
    assert [case.text for case in manifest.golden] == list(GOLDEN_TEXTS)
    _serve(tmp_path / "plain" / "1", "plain")


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_slow_tokenizer_files_are_converted_as_transformers_converts_them(arch: str, tmp_path: Path) -> None:
    folder = save_classifier(ARCHITECTURES[arch], tmp_path / "classifier")
    fast = transformers.AutoTokenizer.from_pretrained(folder)
    keep_slow_files(folder, arch)
    assert _export(folder, tmp_path / "models", "slow", "--no-latency") == 0
    served = _serve(tmp_path / "models" / "slow" / "1", "slow")
    batch = texts(8, seed=4)
    expected = fast(batch, truncation=True, max_length=served.manifest.max_len)["input_ids"]
    assert [list(ids) for ids in served.tokenizer.encode(batch).ids] == expected


def _config(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        edit(config)
        (folder / "config.json").write_text(json.dumps(config))

    return apply


def _no_tokenizer(folder: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()


def _base_weights(folder: Path) -> None:
    """A base model's weights under a classifier's config: the head would be random."""
    transformers.AutoModel.from_pretrained(folder).save_pretrained(folder / "base")
    shutil.move(folder / "base" / "model.safetensors", folder / "model.safetensors")


REFUSALS: dict[str, tuple[Callable[[Path], None], tuple[str, ...], str]] = {
    "unknown architecture": (
        _config(lambda c: c.update(model_type="gpt2", architectures=["GPT2ForSequenceClassification"])),
        (),
        "architecture GPT2ForSequenceClassification (model_type 'gpt2') is not one attnserve-export imports",
    ),
    "not a classifier": (
        _config(lambda c: c.update(architectures=["BertForMaskedLM"])),
        (),
        "is not one attnserve-export imports; supported: BertForSequenceClassification (bert)",
    ),
    "custom code": (
        _config(lambda c: c.update(auto_map={"AutoModelForSequenceClassification": "mine.Model"})),
        (),
        "custom code (auto_map",
    ),
    "no tokenizer": (_no_tokenizer, (), "no tokenizer (tokenizer.json, vocab.txt"),
    "missing head weights": (_base_weights, (), "the weights do not fit config.json (2 missing"),
    "int8 without rows": (lambda folder: None, ("--quantize", "int8"), "give --rows FILE"),
    "too long": (lambda folder: None, ("--max-len", "41"), "--max-len 41: the model reads 1 to 40 tokens"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals_name_the_reason_and_publish_nothing(
    case: str, bert_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit, flags, message = REFUSALS[case]
    folder = tmp_path / "classifier"
    shutil.copytree(bert_folder, folder)
    edit(folder)
    assert _export(folder, tmp_path / "models", "m", "--no-latency", *flags) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert message in err, err
    assert not (tmp_path / "models" / "m" / "1").exists()


@pytest.mark.parametrize("flag", ["--rows", "--max-len"])
def test_a_training_run_refuses_the_flags_of_an_imported_model(
    flag: str, trained_run: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    value = str(tmp_path / "rows.csv") if flag == "--rows" else "8"
    assert _export(trained_run("bow_mlp"), tmp_path, "m", flag, value, "--no-latency") == 2
    assert f"{flag} is for a Hugging Face folder" in capsys.readouterr().err
