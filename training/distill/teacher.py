"""The teacher: its labels matched to the data's, its logits cached; a run teacher's logits.

A teacher is a ``TeacherModel``: a run directory here (``Teacher``), a Hugging Face folder
(hf_teacher.py) or a bundle (bundle_teacher.py); sources.py tells which ``--teacher`` names.
A run teacher's logits are computed in PyTorch through ``load_run`` (on CUDA when present),
over texts encoded with its own tokenizer and batched by length. Every teacher's logits are
computed once and cached in the student's run folder under the teacher's checksum (what
fixes its logits: a run's checkpoint.pt sha256) and the texts' sha256: the next
run with the same teacher and texts reads them back; another teacher or other texts
(another --augment, seed or data) computes them anew and replaces the file. Under torchrun
rank 0 alone reads and writes the cache (the others may be on machines without a copy of its
disk); on a miss every rank scores its share of the texts and rank 0 gathers them.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from tokenizers import Tokenizer
from tqdm import tqdm

from attnserve.training.data.core import DataError
from attnserve.training.loop import distributed
from attnserve.training.loop.batching import Split, batch_tensors, scoring_batches
from attnserve.training.loop.progress import on_terminal
from attnserve.training.models import REGISTRY
from attnserve.training.run.checkpoint import CHECKPOINT, LoadedRun, load_run

log = logging.getLogger(__name__)
CACHE_DIR = "teacher"
MASK = "[MASK]"
UNK = "[UNK]"
LOG_EVERY_S = 30.0  # a progress line this often where no bar is drawn


class TeacherError(DataError):
    """The teacher cannot teach this data (its labels differ, its run is incomplete)."""


class TeacherModel(Protocol):
    """What distillation asks of a teacher, whatever it is."""

    @property
    def labels(self) -> list[str]: ...  # its logits' columns, in its own order

    @property
    def checksum(self) -> str: ...  # identifies its logits (the cache key): weights, max_len

    @property
    def mask_token(self) -> str: ...  # how augmentation writes a mask for it

    def record(self) -> dict[str, Any]: ...  # what the student's metrics.json says of it

    def logits(self, texts: Sequence[str], device: torch.device, max_tokens: int) -> np.ndarray:
        """[N, C] in its own label order."""
        ...


@dataclass(frozen=True)
class Teacher:
    """A training run as a teacher."""

    run: LoadedRun
    checksum: str  # sha256 of its checkpoint.pt
    tokenizer: Tokenizer

    @property
    def mask_token(self) -> str:
        """How augmentation writes a mask for this teacher: its [MASK] if it has one."""
        return MASK if self.tokenizer.token_to_id(MASK) is not None else UNK

    @property
    def labels(self) -> list[str]:
        return list(self.run.labels)

    def record(self) -> dict[str, Any]:
        return {"kind": "run", "family": self.run.family}

    def logits(self, texts: Sequence[str], device: torch.device, max_tokens: int) -> np.ndarray:
        return compute_logits(self, texts, device, max_tokens=max_tokens)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_teacher(run_dir: str | Path) -> Teacher:
    run_path = Path(run_dir)
    if not (run_path / CHECKPOINT).is_file():
        raise TeacherError(f"--teacher {run_path}: no {CHECKPOINT} there; give a training run directory")
    try:
        run = load_run(run_path)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise TeacherError(f"--teacher {run_path} cannot be loaded: {exc}") from exc
    if run.multi_label:
        raise TeacherError(
            f"--teacher {run_path} is a multi-label run (a sigmoid per label): distillation learns a "
            "teacher's softmax over one label per text"
        )
    tokenizer = Tokenizer.from_file(str(run.tokenizer_path))
    return Teacher(run, file_sha256(run_path / CHECKPOINT), tokenizer)


def label_order(teacher_labels: Sequence[str], data_labels: Sequence[str]) -> np.ndarray:
    """Column of the teacher's logits for each of the data's classes, in the data's order."""
    if sorted(teacher_labels) != sorted(data_labels) or len(set(teacher_labels)) != len(teacher_labels):
        raise TeacherError(
            f"the teacher's labels {sorted(teacher_labels)} differ from the data's {sorted(data_labels)}: "
            "distil from a teacher trained on the same classes"
        )
    column = {name: i for i, name in enumerate(teacher_labels)}
    return np.array([column[name] for name in data_labels], dtype=np.int64)


def texts_sha256(texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()


@torch.no_grad()
def compute_logits(
    teacher: Teacher, texts: Sequence[str], device: torch.device, batch_size: int = 64, max_tokens: int = 2048
) -> np.ndarray:
    """The teacher's logits [N, C] (its own class order) for ``texts``, shortest texts first."""
    run = teacher.run
    enc = REGISTRY[run.family].encode_texts(teacher.tokenizer, texts, run.max_len, run.truncation)
    split = Split(enc.input_ids, enc.lengths, np.zeros(len(texts), dtype=np.int64))
    model = run.model.to(device).eval()
    out = np.zeros((len(texts), len(run.labels)), dtype=np.float32)
    for idx in with_progress(scoring_batches(split, batch_size, max_tokens), len(texts)):
        ids, mask, _ = batch_tensors(split, idx, device)
        out[idx] = model.logits(ids, mask).float().cpu().numpy()
    return out


def with_progress(batches: list[np.ndarray], total: int) -> Iterator[np.ndarray]:
    """``batches`` of row indexes, a bar drawn on a terminal, else a log line every LOG_EVERY_S."""
    bar = tqdm(total=total, desc="teacher", unit="text", disable=not on_terminal(), leave=False)
    start = last = time.perf_counter()
    done = 0
    for idx in batches:
        yield idx
        done += len(idx)
        bar.update(len(idx))
        if bar.disable and time.perf_counter() - last > LOG_EVERY_S:
            last = time.perf_counter()
            log.info("teacher: %d/%d texts, %.0f s", done, total, last - start)
    bar.close()


@dataclass(frozen=True)
class TeacherLogits:
    logits: np.ndarray  # [N, C] in the data's class order
    cached: bool  # read back from the cache, not computed
    seconds: float  # what computing (or reading) them took
    path: Path


def cached_logits(
    teacher: TeacherModel,
    texts: Sequence[str],
    data_labels: Sequence[str],
    cache_root: Path,
    device: torch.device,
    max_tokens: int = 2048,
) -> TeacherLogits:
    """The teacher's logits for ``texts`` in the data's class order, from the cache or computed."""
    order = label_order(teacher.labels, data_labels)
    at = distributed.ranks()
    start = time.perf_counter()
    folder = cache_root / CACHE_DIR
    path = folder / f"logits-{teacher.checksum[:16]}-{texts_sha256(texts)[:16]}.npz"
    saved = distributed.from_rank_0(lambda: _read_cache(path, (len(texts), len(order))), at)
    if saved is not None:
        log.info("teacher: %d logits read from %s", len(texts), path)
        return TeacherLogits(saved[:, order], True, time.perf_counter() - start, path)
    log.info("teacher: computing logits for %d texts on %s", len(texts), device)
    logits = np.zeros((len(texts), len(order)), dtype=np.float32)
    shares = distributed.gathered(_score_share(teacher, texts, device, max_tokens, at), at)
    for rank, share in enumerate(shares):  # rank r scored texts r, r + world, ...
        logits[rank :: at.world] = share
    if at.main:
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("logits-*.npz"):  # another teacher's or other texts': never read again
            stale.unlink()
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, logits=logits, teacher=teacher.checksum)
        tmp.replace(path)
    seconds = time.perf_counter() - start
    log.info("teacher: %d texts in %.1f s, cached in %s", len(texts), seconds, path)
    return TeacherLogits(logits[:, order], False, seconds, path)


def _read_cache(path: Path, shape: tuple[int, int]) -> np.ndarray | None:
    """The cached logits at ``path`` when there are and they fit ``shape``."""
    if not path.is_file():
        return None
    with np.load(path) as saved:
        logits: np.ndarray = saved["logits"]
    return logits if logits.shape == shape else None


def _score_share(
    teacher: TeacherModel, texts: Sequence[str], device: torch.device, max_tokens: int, at: distributed.Ranks
) -> np.ndarray:
    """This rank's share of the teacher's logits: texts rank, rank + world, ..."""
    mine = list(texts[at.rank :: at.world])
    if not mine:
        return np.zeros((0, len(teacher.labels)), dtype=np.float32)
    return teacher.logits(mine, device, max_tokens)
