"""A Hugging Face sequence-classifier folder as an export source, like a training run.

Read in the order a failure is cheapest: config.json's checks (hf_folder.py), the ``--rows``
file, the tokenizer as transformers loads it (hf_tokenizer.py), then the weights
(hf_model.py). The folder has no splits of its own, so:

- golden cases are the first rows of each label of ``--rows``, or built-in sentences;
- the int8 gates (the label graph's, ``--quantize int8``) measure ``--rows``, and without
  them the graphs stay float32;
- no temperature is fitted: the bundle serves the model's own scores, softmax(logits)
  (``attnserve-export calibrate`` fits one on other rows later), sigmoid(logits) per label
  for a multi-label model, the value of a regression;
- the data profile is measured on ``--rows``, where the tokenizer has the [UNK] the server counts
  (a single-label model's only: it records softmax confidences and the labels' shares).

``problem_type`` (hf_folder.py) decides the bundle's ``scoring`` and what ``--rows`` hold
(problem_rows.py): a multi-label model's thresholds are chosen on them and its int8 gates
compare micro-F1 at those thresholds; a regression's graphs stay float32 (``REGRESSION_INT8``).

The shipped tokenizer is proven to give transformers' ids on the golden texts, a text past
``max_len`` and the rows before anything is exported.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

from attnserve.export.errors import ExportRequestError
from attnserve.export.evalset import EvalSet
from attnserve.export.golden import pick_texts
from attnserve.export.held_out import GateSource, HeldOut
from attnserve.export.hf_folder import CONFIG_FILE, ClassifierFolder, read_classifier_folder
from attnserve.export.hf_model import TransformersClassifier, choose_max_len, load_classifier
from attnserve.export.hf_tokenizer import ImportedTokenizer, prove_tokenizer, write_tokenizer
from attnserve.export.problem_rows import ProblemRows, golden_texts, problem_scoring, read_problem_rows
from attnserve.export.quantize import ACCURACY, GateMetric, MicroF1
from attnserve.export.rows_file import LABEL_COLUMN, ROWS_SPLIT, TEXT_COLUMN, read_rows_file
from attnserve.service.bundle import TOKENIZER_FILE, GateRows, Problem, Scoring, sha256_file
from attnserve.training.models import config_to_dict
from attnserve.training.run.checkpoint import LoadedRun

log = logging.getLogger(__name__)
TASK = "transformers"  # LoadedRun.task of an imported model: it was trained elsewhere
# Golden texts when no --rows are given: short everyday sentences, mixed case and punctuation.
GOLDEN_TEXTS = (
    "This was a wonderful film, and the cast was great.",
    "The service was slow and the food arrived cold.",
    "Nothing about it surprised me; it was fine, I suppose.",
    "Shipping took 3 weeks!! Would NOT order again.",
)
PROOF_ROWS = 64  # --rows texts the tokenizer is proven on, besides the golden texts
# Why a regression's graphs stay float32, printed where the label graph would have tried int8
# and the reason --quantize int8 is refused for it.
REGRESSION_INT8 = (
    "int8 is not offered for a regression model: the int8 gates bound a drop of accuracy or micro-F1 "
    "(fractions, --max-accuracy-drop points), and a regression's error is in the units of its values, "
    "which no such bound fits, so its graphs stay float32"
)


def import_folder(
    path: Path,
    scratch: Path,
    golden_count: int,
    *,
    rows: Path | None,
    max_len: int | None,
    text_column: str = TEXT_COLUMN,
    label_column: str = LABEL_COLUMN,
) -> tuple[LoadedRun, HeldOut]:
    """The folder's model as a run and its held-out rows; the tokenizer is written to ``scratch``."""
    if golden_count < 1:
        raise ExportRequestError(f"the golden set needs at least one case, got {golden_count}")
    folder = read_classifier_folder(path)
    problem = folder.problem
    gate_rows, other_rows = _read_rows(folder, rows, text_column, label_column)
    tokenizer, model = _load(folder, scratch, max_len)
    golden = list(GOLDEN_TEXTS[:golden_count])
    if other_rows is not None:
        golden = golden_texts(other_rows, problem, golden_count)
    elif gate_rows is not None:
        golden = pick_texts(gate_rows, golden_count)
    read = other_rows if other_rows is not None else gate_rows
    long_text = " ".join(GOLDEN_TEXTS * (model.config.max_len // 8 + 1))  # past max_len: cut as served
    proof = [*golden, long_text, *(read.texts[:PROOF_ROWS] if read is not None else [])]
    prove_tokenizer(tokenizer, proof, model.config.max_len)
    scoring = problem_scoring(
        problem, folder.labels, other_rows, model, tokenizer.path, model.config.max_len, tokenizer.truncation
    )
    run = LoadedRun(
        model=model,
        family=model.family,
        config=config_to_dict(model.config),
        labels=folder.labels,
        max_len=model.config.max_len,
        pad_id=tokenizer.pad_id,
        task=TASK,
        metrics={"source": _provenance(folder)},
        tokenizer_path=tokenizer.path,
        eval_path=None,
        run_dir=path,
        truncation=tokenizer.truncation,
    )
    profile = None
    if rows is not None and problem != Problem.SINGLE_LABEL:
        log.info(
            "no data profile: it records softmax confidences and label shares, not %s scores", problem.value
        )
    elif gate_rows is not None and rows is not None:
        if tokenizer.has_unk:
            profile = (gate_rows, f"--rows {rows.name} through the exported graph")
        else:
            log.warning("no data profile: the tokenizer has no [UNK], whose share the profile records")
    held_out = HeldOut(
        golden_texts=golden,
        validation=None,
        profile=profile,
        gate=_gate(gate_rows, rows, scoring),
        scoring=scoring,
        metric=_metric(scoring),
    )
    return run, held_out


def _read_rows(
    folder: ClassifierFolder, rows: Path | None, text_column: str, label_column: str
) -> tuple[EvalSet | None, ProblemRows | None]:
    """``--rows`` as the int8 gates read them (none for a regression), and as a multi-label or
    regression model's targets (None for a softmax classifier, whose labels are the gate's)."""
    if rows is None:
        return None, None
    if folder.problem == Problem.SINGLE_LABEL:
        return read_rows_file(rows, folder.labels, text_column, label_column), None
    read = read_problem_rows(rows, folder.labels, folder.problem, text_column, label_column)
    return (read.eval_set() if folder.problem == Problem.MULTI_LABEL else None), read


def load_imported_model(path: Path, max_len: int | None = None) -> TransformersClassifier:
    """The folder's model as ``import_folder`` exports it."""
    with tempfile.TemporaryDirectory(prefix="attnserve-import-") as scratch:
        return _load(read_classifier_folder(path), Path(scratch), max_len)[1]


def _load(
    folder: ClassifierFolder, scratch: Path, max_len: int | None
) -> tuple[ImportedTokenizer, TransformersClassifier]:
    config = folder.config
    vocab_size, config_pad = int(config.get("vocab_size", 0)), config.get("pad_token_id")
    tokenizer = write_tokenizer(folder.folder, scratch / TOKENIZER_FILE, vocab_size, config_pad)
    positions = int(config.get("max_position_embeddings", 512))
    length = choose_max_len(folder.model_type, positions, tokenizer.max_length, max_len)
    specials = tokenizer.transformers_tokenizer.num_special_tokens_to_add(pair=False)
    if length <= specials:
        raise ExportRequestError(f"max_len {length} leaves no room beside the {specials} special tokens")
    model = load_classifier(
        folder.folder, model_type=folder.model_type, max_len=length, pad_id=tokenizer.pad_id
    )
    return tokenizer, model


def _metric(scoring: Scoring | None) -> GateMetric:
    """Micro-F1 at the thresholds for a multi-label model, accuracy for a softmax."""
    return MicroF1(scoring) if scoring is not None and scoring.multi else ACCURACY


def _gate(rows: EvalSet | None, file: Path | None, scoring: Scoring | None) -> GateSource:
    def gate() -> tuple[EvalSet, GateRows]:
        if scoring is not None and scoring.regression:
            raise ExportRequestError(REGRESSION_INT8)
        if rows is None or file is None:
            raise ExportRequestError(
                "the int8 gates measure held-out rows: give --rows FILE (CSV or JSONL with text and "
                "label columns) to export int8 from a Hugging Face folder"
            )
        return rows, GateRows(file=file.name, split=ROWS_SPLIT, rows=len(rows), sha256=sha256_file(file))

    return gate


def _provenance(folder: ClassifierFolder) -> dict[str, Any]:
    """Where the model came from, for the manifest (figures the server shows are numbers: none here)."""
    import transformers

    return {
        "format": TASK,
        "folder": str(folder.folder),  # as the command named it
        "architecture": folder.architecture,
        "model_type": folder.model_type,
        "problem_type": folder.problem.value,
        "transformers_version": transformers.__version__,
        "config_sha256": sha256_file(folder.folder / CONFIG_FILE),
    }
