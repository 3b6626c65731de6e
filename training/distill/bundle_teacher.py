"""A bundle version as a teacher: the folder it was imported from, else its own graph.

``attnserve-export FOLDER`` records where an imported model came from in bundle.json
(``training_metrics.source``: format "transformers", the folder as the command named it,
config.json's sha256). Where that folder is still there with the same config.json, and
transformers' logits on the bundle's golden texts are the golden logits (within their
tolerance: the same weights), the teacher is the folder (hf_teacher.py), cut at the bundle's
max_len unless ``--teacher-max-len`` says otherwise. Otherwise, and for any other bundle, the
logits are the bundle's graph's, run by onnxruntime on the CPU with its own tokenizer.json,
max_len and side, as export computes a bundle's logits (export/evalset.py ``graph_logits``):
its label graph where it has a float32 one (logits only), else model.onnx. The bundle must
verify and be a softmax classifier; a cascade version is refused, naming its teacher member.
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
from tokenizers import Tokenizer

from attnserve.export.hf_folder import CONFIG_FILE, is_classifier_folder
from attnserve.service.bundle import (
    MANIFEST_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    BundleError,
    BundleManifest,
    read_bundle,
    sha256_file,
)
from attnserve.service.bundle.cascade import is_cascade
from attnserve.training.distill.hf_teacher import FolderTeacher, load_folder_teacher, refuse_problem
from attnserve.training.distill.teacher import MASK, UNK, TeacherError, TeacherModel

log = logging.getLogger(__name__)
IMPORTED = "transformers"  # training_metrics.source.format of an imported model (export/hf_import.py)
MASKS = (MASK, "<mask>")  # a BERT's, a RoBERTa's


@dataclass(frozen=True)
class GraphTeacher:
    """A bundle's graph as a teacher."""

    root: Path
    manifest: BundleManifest
    graph: str  # the graph file the logits come from

    @property
    def labels(self) -> list[str]:
        return list(self.manifest.labels)

    @property
    def checksum(self) -> str:
        m = self.manifest
        key = f"onnx:{m.files[self.graph]}:{m.files[TOKENIZER_FILE]}:{m.max_len}:{m.truncation}"
        return hashlib.sha256(key.encode()).hexdigest()

    @property
    def mask_token(self) -> str:
        tokenizer = Tokenizer.from_file(str(self.root / TOKENIZER_FILE))
        return next((mask for mask in MASKS if tokenizer.token_to_id(mask) is not None), UNK)

    def record(self) -> dict[str, Any]:
        return {**_bundle_record(self.manifest), "family": self.manifest.family, "graph": self.graph}

    def logits(self, texts: Sequence[str], device: torch.device, max_tokens: int) -> np.ndarray:
        """[N, C] of the graph on the CPU (``device`` aside), as many threads as PyTorch's."""
        from attnserve.export.evalset import graph_logits
        from attnserve.export.parity import cpu_session

        m = self.manifest
        session = cpu_session(self.root / self.graph, threads=torch.get_num_threads())
        chunk = max(1, min(64, max_tokens // m.max_len)) if max_tokens > 0 else 64
        return graph_logits(session, self.root / TOKENIZER_FILE, list(texts), m.max_len, m.truncation, chunk)


def is_bundle(path: Path) -> bool:
    return (path / MANIFEST_FILE).is_file()


def load_bundle_teacher(path: Path, max_len: int | None = None) -> TeacherModel:
    """The bundle at ``path`` as a teacher: its source folder where it still holds the model,
    else its graph (``max_len``, --teacher-max-len, only for the folder)."""
    if is_cascade(path):
        raise TeacherError(
            f"--teacher {path} is a cascade version; give its teacher member, {path / 'teacher'}"
        )
    try:
        manifest = read_bundle(path).manifest
    except BundleError as exc:
        raise TeacherError(f"--teacher {path}: the bundle does not verify: {exc}") from None
    refuse_problem(path, manifest.scores.problem)
    folder = _source_folder(manifest)
    if folder is not None:
        teacher = _folder_teacher(path, manifest, folder)
        if teacher is not None:
            return teacher if max_len is None else teacher.at_max_len(max_len)
    if max_len is not None and max_len != manifest.max_len:
        raise TeacherError(
            f"--teacher-max-len {max_len}: the bundle {path} is scored by its graph, which reads the "
            f"{manifest.max_len} tokens it was exported with (its source folder is not at hand)"
        )
    label_graph = manifest.label_graph
    float32 = label_graph is not None and label_graph.quantization is None
    graph = label_graph.file if label_graph is not None and float32 else MODEL_FILE
    log.info("teacher: the bundle %s, scored by its %s with onnxruntime", path, graph)
    return GraphTeacher(path, manifest, graph)


def _bundle_record(manifest: BundleManifest) -> dict[str, Any]:
    return {"kind": "bundle", "bundle": f"{manifest.name}/{manifest.version}"}


def _source_folder(manifest: BundleManifest) -> Path | None:
    """The folder an imported bundle came from, when it is there with the same config.json."""
    source = manifest.training_metrics.get("source")
    if not isinstance(source, dict) or source.get("format") != IMPORTED:
        return None
    named, config_sha = source.get("folder"), source.get("config_sha256")
    if not isinstance(named, str):
        return None
    folder = Path(named)
    if not is_classifier_folder(folder):
        log.info("teacher: %s, the folder the bundle was imported from, is gone", folder)
        return None
    if sha256_file(folder / CONFIG_FILE) != config_sha:
        log.warning("teacher: %s has another config.json than the bundle was imported from", folder)
        return None
    return folder


def _folder_teacher(path: Path, manifest: BundleManifest, folder: Path) -> FolderTeacher | None:
    """The folder's model at the bundle's max_len, if it gives the bundle's golden logits."""
    loaded = load_folder_teacher(folder, manifest.max_len)
    teacher = replace(loaded, via=_bundle_record(manifest))
    cases = manifest.golden
    if cases:
        got = teacher.logits([case.text for case in cases], torch.device("cpu"), 0)
        for case, row in zip(cases, got, strict=True):
            if not np.allclose(row, case.logits, rtol=0.0, atol=max(case.tolerance, 1e-3)):
                log.warning(
                    "teacher: %s no longer gives the bundle's golden logits (%s against %s): scoring "
                    "with the bundle's graph instead",
                    folder, np.round(row, 4).tolist(), np.round(case.logits, 4).tolist(),
                )  # fmt: skip
                return None
    log.info("teacher: the bundle %s, scored by transformers from %s", path, folder)
    return teacher
