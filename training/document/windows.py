"""The window model: a served bundle version whose windows a document head combines.

Texts are cut into windows by the server's own tokenizer class (`TextTokenizer.encode_windows`
with the run's `LongTexts`: tokenizers' truncation with stride, each window with its special
tokens), so training reads exactly the windows a server with `--long-text windows` reads.
Every window's logits come once from onnxruntime on the CPU, on the graph the server runs for
calls that ask no attention (the label graph where the bundle has one, else model.onnx), fed
as the server feeds it (`pad_ids`). A head that reads the windows' vectors gets them from the
same run: the graph with the `vector` output an export gives it (export/vector_graph.py), the
final layer checked against the first batch's logits. Both are cached in OUT/windows.npz
(`logits` [R, C], `vectors` [R, D] where asked, `counts` [N]: the windows of each text, texts
in the order given) and reused while the graph, the tokenizer, the policy and the texts stay
the same.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from attnserve.export.vector_graph import (
    VECTOR,
    NoFinalLayer,
    check_vectors,
    find_final_layer,
    with_vector,
)
from attnserve.service.bundle import (
    MODEL_FILE,
    TOKENIZER_FILE,
    BundleError,
    BundleManifest,
    LongTexts,
    Problem,
    read_bundle,
)
from attnserve.service.bundle.cascade import is_cascade
from attnserve.service.engine.models.runtime import pad_ids
from attnserve.service.engine.models.tokenization import TextTokenizer
from attnserve.service.errors import InvalidArgument
from attnserve.training.cli.exits import UsageError
from attnserve.training.document.record import CACHE_FILE, WindowBundle

log = logging.getLogger(__name__)
CUT_BATCH = 256  # texts cut at once
RUN_BATCH = 256  # windows per onnxruntime run
_NO_LIMIT = 4096  # LongTexts' most windows: the run checks the policy's limit itself, naming the row


@dataclass(frozen=True)
class WindowModel:
    root: Path
    manifest: BundleManifest
    graph: str  # the file the windows' logits come from

    @property
    def labels(self) -> list[str]:
        return list(self.manifest.labels)

    @property
    def temperature(self) -> float:
        calibration = self.manifest.calibration
        return 1.0 if calibration is None else calibration.temperature

    def record(self) -> WindowBundle:
        m = self.manifest
        return WindowBundle(
            path=str(self.root), name=m.name, version=m.version, graph=self.graph, files=dict(m.files)
        )

    def policy(self, window: int | None, stride: int | None, max_windows: int) -> LongTexts:
        """The windows asked for; as `attnserve-export --long-texts windows` defaults them: the
        model's max_len, sharing a quarter of a window's text tokens."""
        window = self.manifest.max_len if window is None else window
        stride = max(0, (window - 2) // 4) if stride is None else stride
        try:
            policy = LongTexts(window=window, stride=stride, max_windows=max_windows)
            policy.check(self.manifest.max_len)
        except ValueError as exc:
            raise UsageError(f"--window/--stride/--max-windows: {' '.join(str(exc).split())}") from None
        return policy

    def tokenizer(self, windows: LongTexts | None = None) -> TextTokenizer:
        """The bundle's tokenizer as a server loads it (texts of any length; `windows`: how it
        cuts a long text into windows)."""
        m = self.manifest
        path = self.root / TOKENIZER_FILE
        return TextTokenizer(path, m.max_len, reject_long=False, max_text_chars=sys.maxsize,
                             truncation=m.truncation, windows=windows)  # fmt: skip

    def cut(self, texts: Sequence[str], policy: LongTexts, where: Sequence[str]) -> list[list[list[int]]]:
        """Per text its windows' token ids, as the server cuts them; `where` names each text's
        row for the refusals (no tokens, more windows than the policy's max_windows)."""
        tokenizer = self.tokenizer(policy.model_copy(update={"max_windows": _NO_LIMIT}))
        out: list[list[list[int]]] = []
        for start in range(0, len(texts), CUT_BATCH):
            batch = list(texts[start : start + CUT_BATCH])
            try:
                windows, _ = tokenizer.encode_windows(batch)
            except InvalidArgument:  # the text that normalises to nothing, by its row
                bad = next(i for i, text in enumerate(batch) if not _has_tokens(tokenizer, text))
                raise UsageError(
                    f"{where[start + bad]} has no tokens (it is empty after normalisation)"
                ) from None
            for offset, each in enumerate(windows):
                if len(each) > policy.max_windows:
                    raise UsageError(
                        f"{where[start + offset]} needs {len(each)} windows of {policy.window} tokens; "
                        f"--max-windows is {policy.max_windows} (a server would refuse it): raise it"
                    )
                out.append([list(encoding.ids) for encoding in each])
        return out

    def vector_size(self) -> int:
        """The size of the graph's pooled vector, the final linear layer's input; NoFinalLayer
        where its logits come out of no such layer."""
        return find_final_layer(onnx.load(str(self.root / self.graph))).size

    def logits(
        self, rows: Sequence[Sequence[int]], vectors: bool = False, threads: int = 0
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """[R, C] float32: the graph's logits of each row, batches of similar length padded as
        the server pads them; and [R, D] the rows' vectors, where `vectors` asks for them."""
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        path = str(self.root / self.graph)
        graph: str | bytes = path
        names, size, layer = ["logits"], 0, None
        if vectors:
            model, layer = with_vector(onnx.load(path))
            graph, names, size = model.SerializeToString(), ["logits", VECTOR], layer.size
        session = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        out = np.zeros((len(rows), len(self.labels)), np.float32)
        kept = np.zeros((len(rows), size), np.float32) if vectors else None
        started, logged = time.perf_counter(), time.perf_counter()
        for start in range(0, len(order), RUN_BATCH):
            picked = order[start : start + RUN_BATCH]
            ids, mask = pad_ids([rows[i] for i in picked], self.manifest.pad_id)
            ran = session.run(names, {"input_ids": ids, "attention_mask": mask})
            out[picked] = ran[0]
            if kept is not None and layer is not None:
                if start == 0:  # the layer found is the one the logits come from
                    check_vectors(layer, ran[0], ran[1], f"{self.root / self.graph}")
                kept[picked] = ran[1]
            if time.perf_counter() - logged >= 5.0:
                done, seconds = start + len(picked), time.perf_counter() - started
                log.info("window logits: %d/%d windows, %.0f windows/s", done, len(rows), done / seconds)
                logged = time.perf_counter()
        return out, kept


def _has_tokens(tokenizer: TextTokenizer, text: str) -> bool:
    try:
        tokenizer.encode_windows([text])
    except InvalidArgument:
        return False
    return True


def load_window_model(path: Path) -> WindowModel:
    """The bundle version at `path`, verified as the server verifies it; refused when it is a
    cascade or scores otherwise than a softmax over its labels."""
    if is_cascade(path):
        raise UsageError(f"--window-model {path} is a cascade version; give one of its members")
    try:
        bundle = read_bundle(path)
    except BundleError as exc:
        raise UsageError(f"--window-model {path}: the bundle does not verify: {exc}") from None
    problem = bundle.manifest.scores.problem
    if problem is not Problem.SINGLE_LABEL:
        raise UsageError(
            f"--window-model {path} is a {problem.value} model; a document head combines the windows of "
            "a single-label (softmax) classifier"
        )
    label_graph = bundle.manifest.label_graph
    graph = MODEL_FILE if label_graph is None else label_graph.file
    return WindowModel(path.resolve(), bundle.manifest, graph)


@dataclass(frozen=True)
class WindowRows:
    """Every window of some texts, text after text: logits [R, C], vectors [R, D] where asked,
    and counts [N], the windows of each text."""

    logits: np.ndarray
    vectors: np.ndarray | None
    counts: np.ndarray


def window_logits(
    model: WindowModel,
    policy: LongTexts,
    texts: Sequence[str],
    where: Sequence[str],
    out_dir: Path,
    vectors: bool = False,
) -> WindowRows:
    """Every window of `texts` through the graph (with their vectors where `vectors` asks), from
    OUT's cache where it holds these texts cut and run the same way."""
    key = _cache_key(model, policy, texts)
    cache = out_dir / CACHE_FILE
    if cache.is_file():
        with np.load(cache) as saved:
            if str(saved["key"]) == key and (not vectors or "vectors" in saved):
                log.info("window logits: reusing %s (%d windows)", cache, len(saved["logits"]))
                kept = np.asarray(saved["vectors"]) if vectors else None
                return WindowRows(np.asarray(saved["logits"]), kept, np.asarray(saved["counts"]))
    started = time.perf_counter()
    windows = model.cut(texts, policy, where)
    counts = np.asarray([len(each) for each in windows], np.int64)
    rows = [row for each in windows for row in each]
    log.info(
        "cut %d texts into %d windows of %d tokens (stride %d) in %.1f s; running %s",
        len(texts),
        len(rows),
        policy.window,
        policy.stride,
        time.perf_counter() - started,
        model.graph,
    )
    try:
        logits, kept = model.logits(rows, vectors)
    except NoFinalLayer as exc:
        raise UsageError(f"--head-input vectors: {exc}") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    if kept is None:
        np.savez(cache, logits=logits, counts=counts, key=np.asarray(key))
    else:
        np.savez(cache, logits=logits, vectors=kept, counts=counts, key=np.asarray(key))
    return WindowRows(logits, kept, counts)


def _cache_key(model: WindowModel, policy: LongTexts, texts: Sequence[str]) -> str:
    m = model.manifest
    digest = hashlib.sha256()
    head = f"{m.files[model.graph]}:{m.files[TOKENIZER_FILE]}:{m.max_len}:{m.truncation}:{m.pad_id}"
    digest.update(f"{head}:{policy.window}:{policy.stride}:{len(texts)}".encode())
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
    return digest.hexdigest()
