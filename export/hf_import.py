"""A Hugging Face sequence-classifier folder as an export source, like a training run.

Read in the order a failure is cheapest: config.json's checks (hf_folder.py), the ``--rows``
file, the tokenizer as transformers loads it (hf_tokenizer.py), then the weights
(hf_model.py). The folder has no splits of its own, so:

- golden cases are the first rows of each label of ``--rows``, or built-in sentences;
- the int8 gates (the label graph's, ``--quantize int8``) measure ``--rows``, and without
  them the graphs stay float32;
- no temperature is fitted: the bundle serves softmax(logits), the model's own scores
  (``attnserve-export calibrate`` fits one on other rows later);
- the data profile is measured on ``--rows``, where the tokenizer has the [UNK] the server counts.

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
from attnserve.export.rows_file import ROWS_SPLIT, read_rows_file
from attnserve.service.bundle import TOKENIZER_FILE, GateRows, sha256_file
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


def import_folder(
    path: Path, scratch: Path, golden_count: int, *, rows: Path | None, max_len: int | None
) -> tuple[LoadedRun, HeldOut]:
    """The folder's model as a run and its held-out rows; the tokenizer is written to ``scratch``."""
    if golden_count < 1:
        raise ExportRequestError(f"the golden set needs at least one case, got {golden_count}")
    folder = read_classifier_folder(path)
    gate_rows = read_rows_file(rows, folder.labels) if rows is not None else None
    tokenizer, model = _load(folder, scratch, max_len)
    golden = list(GOLDEN_TEXTS[:golden_count]) if gate_rows is None else pick_texts(gate_rows, golden_count)
    long_text = " ".join(GOLDEN_TEXTS * (model.config.max_len // 8 + 1))  # past max_len: cut as served
    proof = [*golden, long_text, *(gate_rows.texts[:PROOF_ROWS] if gate_rows is not None else [])]
    prove_tokenizer(tokenizer, proof, model.config.max_len)
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
    if gate_rows is not None and rows is not None:
        if tokenizer.has_unk:
            profile = (gate_rows, f"--rows {rows.name} through the exported graph")
        else:
            log.warning("no data profile: the tokenizer has no [UNK], whose share the profile records")
    held_out = HeldOut(golden_texts=golden, validation=None, profile=profile, gate=_gate(gate_rows, rows))
    return run, held_out


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


def _gate(rows: EvalSet | None, file: Path | None) -> GateSource:
    def gate() -> tuple[EvalSet, GateRows]:
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
        "transformers_version": transformers.__version__,
        "config_sha256": sha256_file(folder.folder / CONFIG_FILE),
    }
