"""A Hugging Face sequence-classifier folder as a teacher: its logits from transformers itself.

The folder is what ``save_pretrained`` writes (config.json, weights, tokenizer files), read
through export's own checks first (export/hf_folder.py: one known ``...ForSequenceClassification``
architecture, no custom code, weights and a tokenizer present), so a folder is refused in the
words ``attnserve-export FOLDER`` would use. A multi-label or regression classifier is refused
too: distillation learns a softmax over one label per text. The labels are config.json's
id2label, matched to the data's by name as a run teacher's are.

The logits are ``AutoModelForSequenceClassification``'s, in eval mode without gradients,
float32, on CUDA when present: texts tokenized by ``AutoTokenizer`` (the folder's own,
``trust_remote_code`` never set), truncated at ``max_len`` tokens on the tokenizer's side (the
model's and tokenizer's limit, or ``--teacher-max-len``), padded per batch of similar
lengths. The checksum that keys the logits' cache is the sha256 of every file at the folder's
top level and ``max_len``: new weights, another tokenizer or another length computes them anew.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnserve.export.errors import ExportRequestError
from attnserve.export.hf_folder import ClassifierFolder, read_classifier_folder
from attnserve.export.hf_model import choose_max_len
from attnserve.service.bundle import Problem
from attnserve.training.distill.teacher import UNK, TeacherError, file_sha256, with_progress
from attnserve.training.loop.batching import capped_runs

log = logging.getLogger(__name__)
BATCH_SIZE = 64  # texts per batch, fewer where they would pad past max_tokens
NO_LIMIT = 1_000_000  # tokenizer_config.json's model_max_length when it sets none (int(1e30))


def refuse_problem(path: Path, problem: Problem) -> None:
    """TeacherError unless ``problem`` is a softmax over labels."""
    if problem == Problem.SINGLE_LABEL:
        return
    meaning = "a sigmoid per label" if problem == Problem.MULTI_LABEL else "one value per text"
    raise TeacherError(
        f"--teacher {path} is a {problem.value} model ({meaning}): distillation learns a teacher's "
        "softmax over one label per text"
    )


def read_teacher_folder(path: Path) -> ClassifierFolder:
    """The folder's config.json, checked as export checks it; a softmax classifier's only."""
    try:
        folder = read_classifier_folder(path)
    except ExportRequestError as exc:
        raise TeacherError(f"--teacher: {exc}") from None
    refuse_problem(path, folder.problem)
    return folder


@dataclass(frozen=True)
class FolderTeacher:
    folder: Path
    architecture: str
    labels: list[str]  # id2label in id order
    max_len: int  # tokens a text is cut to
    files_sha256: str  # every file at the folder's top level
    model: Any  # transformers' AutoModelForSequenceClassification, eval, float32
    tokenizer: Any  # transformers' AutoTokenizer of the folder
    via: dict[str, Any] | None = None  # the bundle it was reached through (bundle_teacher.py)

    @property
    def checksum(self) -> str:
        return hashlib.sha256(f"transformers:{self.files_sha256}:{self.max_len}".encode()).hexdigest()

    @property
    def mask_token(self) -> str:
        """Its own mask token (``[MASK]``, ``<mask>``), written in the text where augmentation masks."""
        mask = getattr(self.tokenizer, "mask_token", None)
        return mask if isinstance(mask, str) and mask else UNK

    def record(self) -> dict[str, Any]:
        mine = {"family": "transformers", "architecture": self.architecture, "folder": str(self.folder),
                "max_len": self.max_len}  # fmt: skip
        return {**(self.via or {"kind": "hf_folder"}), **mine}

    def at_max_len(self, max_len: int) -> FolderTeacher:
        return replace(self, max_len=max_len)

    @torch.no_grad()
    def logits(self, texts: Sequence[str], device: torch.device, max_tokens: int) -> np.ndarray:
        """[N, C] in id2label's order, shortest texts first in batches."""
        encoded = self.tokenizer(list(texts), truncation=True, max_length=self.max_len)
        ids: list[list[int]] = encoded["input_ids"]
        lengths = np.asarray([max(len(row), 1) for row in ids], dtype=np.int64)
        order = np.argsort(lengths, kind="stable")
        batches = [order[run] for run in capped_runs(lengths[order], BATCH_SIZE, max_tokens)]
        model = self.model.to(device)
        pad = int(self.tokenizer.pad_token_id)
        left = getattr(self.tokenizer, "padding_side", "right") == "left"
        out = np.zeros((len(texts), len(self.labels)), dtype=np.float32)
        for idx in with_progress(batches, len(texts)):
            width = int(lengths[idx].max())
            batch = torch.full((len(idx), width), pad, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for row, i in enumerate(idx):
                cut = slice(width - len(ids[i]), width) if left else slice(0, len(ids[i]))
                batch[row, cut] = torch.tensor(ids[i], dtype=torch.long)
                mask[row, cut] = 1
            got = model(input_ids=batch.to(device), attention_mask=mask.to(device)).logits
            out[idx] = got.float().cpu().numpy()
        return out


def folder_sha256(path: Path) -> str:
    """sha256 of the names and contents of every file at ``path``'s top level, by name."""
    digest = hashlib.sha256()
    for file in sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")):
        digest.update(f"{file.name}\0{file_sha256(file)}\0".encode())
    return digest.hexdigest()


def load_folder_teacher(path: Path, max_len: int | None = None) -> FolderTeacher:
    """The folder's classifier and tokenizer as transformers loads them, every weight from the
    folder (a missing one is refused, not drawn at random); ``max_len`` None: the model's limit."""
    folder = read_teacher_folder(path)
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
        model, info = AutoModelForSequenceClassification.from_pretrained(
            str(path), local_files_only=True, trust_remote_code=False, output_loading_info=True
        )
    except (OSError, ValueError, TypeError, KeyError, ImportError, RuntimeError) as exc:
        why = " ".join(str(exc).split())
        raise TeacherError(f"--teacher {path}: transformers cannot load it: {why}") from exc
    missing = sorted(info.get("missing_keys") or ())
    missing += sorted(str(key) for key in info.get("mismatched_keys") or ())
    if missing:
        raise TeacherError(
            f"--teacher {path}: the weights do not fit config.json (e.g. {missing[0]}); transformers "
            "would fill them with random numbers"
        )
    if tokenizer.pad_token_id is None:
        raise TeacherError(f"--teacher {path}: the tokenizer has no padding token")
    positions = int(folder.config.get("max_position_embeddings", 512))
    limit = tokenizer.model_max_length
    own = int(limit) if isinstance(limit, int | float) and limit < NO_LIMIT else None
    try:
        length = choose_max_len(folder.model_type, positions, own, max_len)
    except ExportRequestError as exc:
        raise TeacherError(str(exc).replace("--max-len", "--teacher-max-len")) from None
    log.info("teacher: %s (%s), texts cut to %d tokens", path, folder.architecture, length)
    return FolderTeacher(
        folder=path,
        architecture=folder.architecture,
        labels=folder.labels,
        max_len=length,
        files_sha256=folder_sha256(path),
        model=model.float().eval(),
        tokenizer=tokenizer,
    )
