"""The run's labelled texts, tokenized with the bundle's own tokenizer and truncation side.

The validation split (``eval.jsonl``) gives the golden cases and the drift profile. It also
chose the checkpoint, so the int8 accuracy gate measures the test split (``test.jsonl``)
instead: rows that neither trained the model nor chose anything. Tokenizing goes through the
``tokenizer.json`` file the bundle ships, cut on the side the manifest records, so the ids
are the ones the service will produce.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Tokenizer

from attnserve.export.errors import ExportError, ExportRequestError
from attnserve.service.bundle import GateRows, Truncation, sha256_file
from attnserve.training.run.checkpoint import TEST_SET
from attnserve.training.text.tokenizer import encode_batch


@dataclass(frozen=True)
class EvalSet:
    texts: list[str]
    labels: npt.NDArray[np.int64]  # [N] class ids, or [N, C] 0/1 for a multi-label run's rows

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def multi_label(self) -> bool:
        """Whether each row holds a set of labels ([N, C] 0/1) rather than one class id."""
        return self.labels.ndim == 2


@dataclass(frozen=True)
class EncodedChunk:
    input_ids: npt.NDArray[np.int64]  # [B, T], padded to this chunk's longest row
    attention_mask: npt.NDArray[np.int64]  # [B, T]
    labels: npt.NDArray[np.int64]  # [B] ([B, C] for multi-label rows)


def load_bundle_tokenizer(path: Path) -> Tokenizer:
    """The bundle's tokenizer.json as the service loads it: any tokenizers file, its special
    tokens wherever its vocabulary puts them (a pretrained BERT's [UNK] is 100, not 1)."""
    if not path.is_file():
        raise ExportError(f"tokenizer file not found: {path}")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for malformed JSON
        raise ExportError(f"{path} is not a valid tokenizers JSON file: {exc}") from None


def read_eval_set(path: Path | None, num_classes: int) -> EvalSet:
    if path is None or not path.is_file():
        raise ExportError(
            "the run directory has no eval.jsonl (the validation split): export needs it for the "
            "bundle's golden cases and data profile; re-run training to produce it"
        )
    return _read_rows(path, num_classes)


def read_gate_rows(run_dir: Path, num_classes: int, seed: int | None) -> tuple[EvalSet, GateRows]:
    """The test split the int8 gate measures, and how the manifest names it.

    ExportRequestError when the run has none: the validation split chose the checkpoint, so
    its accuracy would not say how int8 does on unseen texts.
    """
    path = run_dir / TEST_SET
    if not path.is_file() or not path.read_text(encoding="utf-8").strip():
        raise ExportRequestError(
            f"--quantize int8 is gated on held-out rows, and {run_dir} has no test split ({TEST_SET} "
            "is missing or empty); retrain with a test split (--test-fraction or --test-data)"
        )
    rows = _read_rows(path, num_classes)
    named = GateRows(file=TEST_SET, split="test", rows=len(rows), sha256=sha256_file(path), seed=seed)
    return rows, named


def _read_rows(path: Path, num_classes: int) -> EvalSet:
    """Rows ``{"text", "label": id}``, or a multi-label run's ``{"text", "labels": [ids]}``
    (training/run/outputs.py), one kind per file."""
    texts: list[str] = []
    labels: list[int] = []
    tagged: list[list[int]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            text, label = row["text"], row["labels"] if "labels" in row else row["label"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ExportError(
                f"{path}:{number}: expected a JSON object with 'text' and 'label' ({exc})"
            ) from None
        multi = isinstance(label, list)
        ids = label if multi else [label]
        if not isinstance(text, str) or not all(isinstance(i, int) and 0 <= i < num_classes for i in ids):
            raise ExportError(
                f"{path}:{number}: 'text' must be a string and 'label' an int in [0, {num_classes}) "
                f"(a multi-label run's 'labels': a list of them)"
            )
        if (multi and labels) or (not multi and tagged):
            raise ExportError(f"{path}:{number}: rows with 'label' and rows with 'labels' in one file")
        texts.append(text)
        if multi:
            tagged.append(ids)
        else:
            labels.append(label)
    if not texts:
        raise ExportError(f"{path} holds no examples")
    if tagged:
        matrix = np.zeros((len(tagged), num_classes), dtype=np.int64)
        for row_index, ids in enumerate(tagged):
            matrix[row_index, ids] = 1
        return EvalSet(texts, matrix)
    return EvalSet(texts, np.asarray(labels, dtype=np.int64))


def encode_chunks(
    tokenizer_path: Path, eval_set: EvalSet, max_len: int, truncation: Truncation, chunk_size: int = 64
) -> Iterator[EncodedChunk]:
    """Encode in chunks sorted by length, so each chunk pads only to its own longest text."""
    tokenizer = load_bundle_tokenizer(tokenizer_path)
    order = sorted(range(len(eval_set)), key=lambda i: len(eval_set.texts[i]))
    for start in range(0, len(order), chunk_size):
        picked = order[start : start + chunk_size]
        encoded = encode_batch(tokenizer, [eval_set.texts[i] for i in picked], max_len, truncation)
        ids, mask = encoded.input_ids, encoded.attention_mask
        if ids.shape[1] == 0:  # every text normalised to nothing: one padded column keeps shapes valid
            ids = mask = np.zeros((len(picked), 1), dtype=np.int64)
        yield EncodedChunk(ids, mask, eval_set.labels[picked])


def encode_one(
    tokenizer_path: Path, text: str, max_len: int, truncation: Truncation | None
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """One text as a batch of one without padding: ids and mask [1, T].

    ``truncation`` None (a bundle that does not record it) keeps the side tokenizer.json saves.
    """
    encoded = encode_batch(load_bundle_tokenizer(tokenizer_path), [text], max_len, truncation)
    return encoded.input_ids, encoded.attention_mask


def graph_logits(
    session: ort.InferenceSession,
    tokenizer_path: Path,
    texts: list[str],
    max_len: int,
    truncation: Truncation | None,
    chunk_size: int = 64,
) -> npt.NDArray[np.float32]:
    """[N, C] logits of a bundle's graph on ``texts``, in their order (`chunked_logits`)."""

    def run(ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        (logits,) = session.run(["logits"], {"input_ids": ids, "attention_mask": mask})
        return np.asarray(logits, np.float32)

    out = chunked_logits(run, tokenizer_path, texts, max_len, truncation, chunk_size)
    if out is None:
        raise ExportError("no texts to run the graph on")
    return out


def chunked_logits(
    run: Callable[[npt.NDArray[np.int64], npt.NDArray[np.int64]], npt.NDArray[np.float32]],
    tokenizer_path: Path,
    texts: list[str],
    max_len: int,
    truncation: Truncation | None,
    chunk_size: int = 64,
) -> npt.NDArray[np.float32] | None:
    """[N, C] `run(ids, mask)` on ``texts`` encoded with the bundle's tokenizer file, in their
    order (None for no texts); chunks sorted by length pad only to their own longest text, as
    the server's length buckets do."""
    tokenizer = load_bundle_tokenizer(tokenizer_path)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: npt.NDArray[np.float32] | None = None
    for start in range(0, len(order), chunk_size):
        picked = order[start : start + chunk_size]
        encoded = encode_batch(tokenizer, [texts[i] for i in picked], max_len, truncation)
        ids, mask = encoded.input_ids, encoded.attention_mask
        if ids.shape[1] == 0:  # every text normalised to nothing: one padded column keeps shapes valid
            ids = mask = np.zeros((len(picked), 1), dtype=np.int64)
        logits = run(ids, mask)
        if out is None:
            out = np.zeros((len(texts), logits.shape[1]), dtype=np.float32)
        out[picked] = logits
    return out
