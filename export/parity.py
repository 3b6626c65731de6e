"""Prove an exported graph computes what the PyTorch model computes.

Torch eager (the reference) and onnxruntime on CPU run the same random batches over a grid of
sequence lengths and batch sizes, with right padding of random length in some rows (a fully
padded row included now and then). Per case we record the worst absolute difference of
logits and attention, and check the rules that hold whatever the tolerance: outputs are
finite, shapes agree, and padded key positions get exactly zero attention in the graph's
output. Lengths other than the export example's prove that the graph's dims are symbolic.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import torch

from attnserve.export.contract import vocab_size as model_vocab_size
from attnserve.export.errors import ParityError
from attnserve.service.bundle import ParityReport
from attnserve.training.models.base import Classifier

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]

PROVIDER = "CPUExecutionProvider"
DEFAULT_LENGTHS = (1, 2, 7, 64)  # max_len is always added
DEFAULT_BATCH_SIZES = (1, 3, 32)
DEFAULT_TOLERANCE = 1e-4


@dataclass(frozen=True)
class Outputs:
    logits: FloatArray  # [B, C]
    attention: FloatArray | None  # family's shape, key axis last


@dataclass(frozen=True)
class CaseResult:
    batch: int
    length: int
    padded_rows: int
    logits_diff: float
    attention_diff: float | None
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class ParityResult:
    tolerance: float | None  # None: differences are measured and reported but not gated
    lengths: list[int]
    batch_sizes: list[int]
    cases: list[CaseResult] = field(default_factory=list)

    @property
    def logits_max_abs_diff(self) -> float:
        return max((case.logits_diff for case in self.cases), default=0.0)

    @property
    def attention_max_abs_diff(self) -> float | None:
        diffs = [case.attention_diff for case in self.cases if case.attention_diff is not None]
        return max(diffs) if diffs else None

    def failures(self) -> list[str]:
        found = []
        for case in self.cases:
            where = f"batch {case.batch}, length {case.length}"
            found += [f"{where}: {problem}" for problem in case.problems]
            if self.tolerance is None:
                continue
            if not case.logits_diff <= self.tolerance:
                found.append(
                    f"{where}: logits differ by {case.logits_diff:.3g} > tolerance {self.tolerance:g}"
                )
            if case.attention_diff is not None and not case.attention_diff <= self.tolerance:
                found.append(
                    f"{where}: attention differs by {case.attention_diff:.3g} > tolerance {self.tolerance:g}"
                )
        return found

    def raise_on_failure(self, graph: str) -> None:
        failures = self.failures()
        if failures:
            shown = "; ".join(failures[:5]) + (f"; and {len(failures) - 5} more" if len(failures) > 5 else "")
            raise ParityError(f"{graph} does not match the PyTorch model: {shown}")

    def report(self) -> ParityReport:
        return ParityReport(
            logits_max_abs_diff=self.logits_max_abs_diff,
            attention_max_abs_diff=self.attention_max_abs_diff,
            lengths=self.lengths,
            batch_sizes=self.batch_sizes,
            provider=PROVIDER,
        )


def parity_lengths(max_len: int, lengths: Sequence[int] = DEFAULT_LENGTHS) -> list[int]:
    """The requested lengths that fit the model, plus max_len itself."""
    return sorted({n for n in lengths if 1 <= n <= max_len} | {max_len})


def cpu_session(path: Path, threads: int = 1) -> ort.InferenceSession:
    """A CPU session for proofs. One thread by default: proofs run small batches, and spinning
    worker threads on a busy machine cost far more than they save (0 = onnxruntime's default)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=[PROVIDER])


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Run PyTorch with ``threads`` intra-op threads, restoring the previous setting after."""
    previous = torch.get_num_threads()
    if previous == threads:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def run_onnx(session: ort.InferenceSession, input_ids: IntArray, attention_mask: IntArray) -> Outputs:
    results = session.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})
    logits = np.asarray(results[0], dtype=np.float32)
    attention = np.asarray(results[1], dtype=np.float32) if len(results) > 1 else None
    return Outputs(logits, attention)


def run_torch(
    model: Classifier, input_ids: IntArray, attention_mask: IntArray, threads: int | None = 1
) -> Outputs:
    """Eager forward pass; ``threads=None`` keeps PyTorch's current thread setting."""
    with torch.inference_mode(), torch_threads(threads or torch.get_num_threads()):
        logits, attention = model(torch.from_numpy(input_ids), torch.from_numpy(attention_mask))
    return Outputs(logits.numpy(), None if attention is None else attention.numpy())


def random_batch(
    rng: np.random.Generator, batch: int, length: int, *, vocab_size: int, pad_id: int, pad_share: float = 0.5
) -> tuple[IntArray, IntArray]:
    """Right-padded ids/mask [batch, length]: row 0 is full, other rows are cut short with
    probability ``pad_share`` to a random length in [0, length) (0 = a fully padded row)."""
    ids = rng.integers(0, vocab_size - 1, size=(batch, length), dtype=np.int64)  # [B, T]
    ids = ids + (ids >= pad_id)  # real tokens never use the pad id
    lengths = np.full(batch, length, dtype=np.int64)  # [B]
    cut = rng.random(batch) < pad_share
    cut[0] = False
    lengths[cut] = rng.integers(0, length, size=int(cut.sum()))
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)  # [B, T]
    return np.where(mask == 1, ids, pad_id).astype(np.int64), mask


def compare(reference: Outputs, candidate: Outputs, attention_mask: IntArray) -> CaseResult:
    """Differences of ``candidate`` (onnxruntime) from ``reference`` (torch) and broken rules."""
    batch, length = attention_mask.shape
    problems: list[str] = []
    logits_diff = _max_abs_diff("logits", reference.logits, candidate.logits, problems)
    attention_diff: float | None = None
    if (reference.attention is None) != (candidate.attention is None):
        problems.append("one side returns attention and the other does not")
    elif reference.attention is not None and candidate.attention is not None:
        attention_diff = _max_abs_diff("attention", reference.attention, candidate.attention, problems)
        if candidate.attention.shape == reference.attention.shape:
            keys = attention_mask.reshape(batch, *([1] * (candidate.attention.ndim - 2)), length)
            padded = np.broadcast_to(keys == 0, candidate.attention.shape)
            leaked = int(np.count_nonzero(candidate.attention[padded]))
            if leaked:
                problems.append(f"{leaked} attention weight(s) on padded positions are not exactly 0")
    return CaseResult(
        batch=batch,
        length=length,
        padded_rows=int((attention_mask.sum(axis=1) < length).sum()),
        logits_diff=logits_diff,
        attention_diff=attention_diff,
        problems=tuple(problems),
    )


def _max_abs_diff(name: str, reference: FloatArray, candidate: FloatArray, problems: list[str]) -> float:
    if reference.shape != candidate.shape:
        problems.append(
            f"{name} shape {list(candidate.shape)} differs from PyTorch's {list(reference.shape)}"
        )
        return float("inf")
    if not np.isfinite(candidate).all():
        problems.append(f"{name} contains NaN or infinity")
        return float("inf")
    if candidate.size == 0:
        return 0.0
    return float(np.max(np.abs(reference.astype(np.float64) - candidate.astype(np.float64))))


def measure_parity(
    model: Classifier,
    session: ort.InferenceSession,
    *,
    max_len: int,
    tolerance: float | None = DEFAULT_TOLERANCE,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    seed: int = 0,
) -> ParityResult:
    """Run the whole grid; the caller decides whether to ``raise_on_failure``."""
    model = model.cpu().eval()
    vocab_size, pad_id = model_vocab_size(model), int(model.config.pad_id)
    rng = np.random.default_rng(seed)
    grid = parity_lengths(max_len, lengths)
    result = ParityResult(tolerance=tolerance, lengths=grid, batch_sizes=sorted(set(batch_sizes)))
    for length in result.lengths:
        for batch in result.batch_sizes:
            ids, mask = random_batch(rng, batch, length, vocab_size=vocab_size, pad_id=pad_id)
            reference = run_torch(model, ids, mask)
            try:
                candidate = run_onnx(session, ids, mask)
            except Exception as exc:  # onnxruntime's errors are untyped; a failed run is a finding
                failed = f"onnxruntime cannot run it ({type(exc).__name__}: {_first_line(exc)})"
                padded = int((mask.sum(axis=1) < length).sum())
                result.cases.append(CaseResult(batch, length, padded, float("inf"), None, (failed,)))
                continue
            result.cases.append(compare(reference, candidate, mask))
    return result


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no message"
