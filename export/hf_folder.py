"""A Hugging Face sequence-classifier folder, checked before anything heavy is loaded.

``save_pretrained`` writes config.json, the weights and the tokenizer's files; export takes
such a folder when config.json names one of the encoder architectures below with a
``...ForSequenceClassification`` head. Everything that would make the bundle answer other
than the model does is refused here with the reason: custom code (``auto_map``), an
architecture not listed, a ``problem_type`` whose scores the bundle cannot declare, a folder
without weights or tokenizer files. Only config.json is parsed; no torch, no transformers model.

``problem_type`` says what the scores mean, and the bundle's ``scoring`` says it to the server
as the same word: a softmax over two or more labels (``single_label_classification``, or no
problem_type with two labels or more), a sigmoid per label (``multi_label_classification``), or
the one output as a value (``regression``, or no problem_type with one label: what
transformers' loss assumes). transformers also trains regression with several outputs; the
server serves one value per text, so that is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnserve.export.errors import ExportRequestError
from attnserve.service.bundle import Problem

CONFIG_FILE = "config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")  # fmt: skip
# What the tokenizer may be read from: the fast file, or the slow files transformers converts.
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model",
                   "tokenizer.model")  # fmt: skip
# model_type -> the head class config.json must name: BERT-family encoders whose eager
# attention returns every layer's weights and whose graphs pass the export's proofs.
ARCHITECTURES = {
    "bert": "BertForSequenceClassification",  # MiniLM and sentence-transformers BERTs too
    "distilbert": "DistilBertForSequenceClassification",
    "roberta": "RobertaForSequenceClassification",
    "xlm-roberta": "XLMRobertaForSequenceClassification",
    "electra": "ElectraForSequenceClassification",
    "albert": "AlbertForSequenceClassification",
    "mpnet": "MPNetForSequenceClassification",
}
SINGLE_LABEL = Problem.SINGLE_LABEL.value  # config.json's problem_type of a softmax classifier


@dataclass(frozen=True)
class ClassifierFolder:
    """A folder that passed the checks: what it holds and what config.json says."""

    folder: Path
    model_type: str
    architecture: str
    labels: list[str]  # id2label, in id order
    config: dict[str, Any]  # config.json as read
    problem: Problem = Problem.SINGLE_LABEL  # what the scores mean (problem_type)


def is_classifier_folder(path: Path) -> bool:
    """Whether ``path`` is meant as a Hugging Face folder (it has a config.json)."""
    return (path / CONFIG_FILE).is_file()


def read_classifier_folder(path: Path) -> ClassifierFolder:
    """The folder's config, refused (ExportRequestError naming why) unless export can serve it."""
    config = _read_json(path / CONFIG_FILE)
    for name in (CONFIG_FILE, TOKENIZER_CONFIG):
        custom = _read_json(path / name).get("auto_map") if (path / name).is_file() else None
        if custom:
            raise ExportRequestError(
                f"{path}: {name} maps classes to custom code (auto_map: {json.dumps(custom)}); "
                "attnserve-export runs transformers' own classes only, never trust_remote_code"
            )
    model_type = config.get("model_type")
    architectures = config.get("architectures")
    if not (isinstance(architectures, list) and len(architectures) == 1 and isinstance(model_type, str)):
        raise ExportRequestError(
            f"{path}/{CONFIG_FILE} names architectures {architectures!r} and model_type {model_type!r}; "
            "export takes one ...ForSequenceClassification architecture (a folder saved by "
            "AutoModelForSequenceClassification.save_pretrained)"
        )
    architecture = str(architectures[0])
    if ARCHITECTURES.get(model_type) != architecture:
        supported = ", ".join(f"{head} ({kind})" for kind, head in ARCHITECTURES.items())
        raise ExportRequestError(
            f"{path}: architecture {architecture} (model_type {model_type!r}) is not one attnserve-export "
            f"imports; supported: {supported}"
        )
    labels = _labels(path, config)
    problem = _problem(path, config, len(labels))
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        raise ExportRequestError(f"{path}: no model weights ({' or '.join(WEIGHT_FILES[::2])})")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ExportRequestError(
            f"{path}: no tokenizer ({', '.join(TOKENIZER_FILES)}); save the model's tokenizer beside it: "
            "AutoTokenizer.from_pretrained(...).save_pretrained(FOLDER)"
        )
    return ClassifierFolder(path, model_type, architecture, labels, config, problem)


def _labels(path: Path, config: dict[str, Any]) -> list[str]:
    """id2label in id order; transformers' LABEL_i names where config.json gives none."""
    id2label = config.get("id2label")
    count = config.get("num_labels", len(id2label) if isinstance(id2label, dict) and id2label else 2)
    if not isinstance(id2label, dict) or not id2label:
        return [f"LABEL_{i}" for i in range(int(count))]
    try:
        by_id = {int(key): str(name) for key, name in id2label.items()}
    except (TypeError, ValueError):
        raise ExportRequestError(f"{path}/{CONFIG_FILE}: id2label keys must be label ids 0..N-1") from None
    if sorted(by_id) != list(range(len(by_id))):
        raise ExportRequestError(
            f"{path}/{CONFIG_FILE}: id2label ids are {sorted(by_id)}; they must be 0..{len(by_id) - 1}"
        )
    labels = [by_id[i] for i in range(len(by_id))]
    if len(set(labels)) != len(labels):
        raise ExportRequestError(f"{path}/{CONFIG_FILE}: id2label names a label twice: {labels}")
    return labels


def _problem(path: Path, config: dict[str, Any], outputs: int) -> Problem:
    """What the scores mean, as transformers' loss reads ``problem_type`` and the label count."""
    # None: transformers' own choice, one output is a regression, more a single-label softmax.
    default = Problem.REGRESSION if outputs == 1 else Problem.SINGLE_LABEL
    word = config.get("problem_type", default.value) or default.value
    known = [p.value for p in Problem]
    if word not in known:
        raise ExportRequestError(
            f"{path}: unknown problem_type {word!r} in config.json; known: {', '.join(known)}"
        )
    problem = Problem(word)
    if problem == Problem.REGRESSION and outputs != 1:
        raise ExportRequestError(
            f"{path}: problem_type 'regression' with {outputs} outputs (id2label lists {outputs}): the "
            "server serves one value per text, so a regression model must have exactly one output"
        )
    if problem != Problem.REGRESSION and outputs < 2:
        raise ExportRequestError(
            f"{path}: a {problem.value} model needs two labels or more, config.json has {outputs} "
            "(a model with one output is a regression: problem_type 'regression')"
        )
    return problem


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ExportRequestError(f"{path}: not readable as JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ExportRequestError(f"{path}: expected a JSON object")
    return value
