"""One servable model version: bundle + tokenizer + onnxruntime session + batcher.

`load_model` is the gate every version passes before it takes traffic: the bundle is
verified (files, sha256, schema), the session's inputs/outputs must match the manifest,
the session is warmed up and must reproduce the bundle's golden outputs, alone and inside
a padded batch. Any failure raises `LoadError` and the version is not served.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnserve.service.bundle import Bundle, BundleError, BundleManifest, check_io, read_bundle
from attnserve.service.engine.attention import AttentionMode, as_layers, extract, importance, top_k
from attnserve.service.engine.batching import Batcher, BatchLimits, Prediction, Row, RowOutput
from attnserve.service.engine.metrics import Metrics, ModelMetrics
from attnserve.service.engine.runtime import DeviceError, RuntimeSession, create_session
from attnserve.service.engine.tokenization import EncodedTexts, TextEncoder, TokenIds
from attnserve.service.errors import InvalidArgument
from attnserve.service.settings import Settings

log = logging.getLogger(__name__)


class LoadError(Exception):
    """A model version cannot be served; the message says why."""


def pad_ids(rows: Sequence[TokenIds], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad token id rows to the longest: (input_ids, attention_mask), int64 [B, T]."""
    width = max(len(row) for row in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)  # [B, T]
    mask = np.zeros((len(rows), width), dtype=np.int64)  # [B, T]
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return np.asarray(shifted / shifted.sum(axis=-1, keepdims=True), dtype=np.float32)


@dataclass(eq=False)
class LoadedModel:
    bundle: Bundle
    encoder: TextEncoder
    runtime: RuntimeSession
    metrics: ModelMetrics
    limits: BatchLimits
    batcher: Batcher = field(init=False)

    def __post_init__(self) -> None:
        manifest = self.manifest
        self.name = manifest.name
        self.version = manifest.version
        self.kind = manifest.attention.kind
        self.labels = tuple(manifest.labels)
        self._pad_id = manifest.pad_id
        self._outputs_logits = ["logits"]
        self._outputs_all = ["logits"] if self.kind == "none" else ["logits", "attention"]
        self.batcher = Batcher(
            name=f"{self.name}/{self.version}",
            run_batch=self.run_batch,
            limits=self.limits,
            metrics=self.metrics,
            num_classes=len(self.labels),
        )

    @property
    def manifest(self) -> BundleManifest:
        return self.bundle.manifest

    @property
    def provider(self) -> str:
        return self.runtime.provider

    async def predict(
        self, encoded: EncodedTexts, mode: AttentionMode, k: int, deadline: float | None
    ) -> Prediction:
        """Classify encoded texts through the batcher (the path every API uses)."""
        return await self.batcher.submit(encoded, mode, k, deadline)

    def run_padded(self, ids: np.ndarray, mask: np.ndarray, attention: bool) -> list[np.ndarray]:
        names = self._outputs_all if attention else self._outputs_logits
        result: list[np.ndarray] = self.runtime.session.run(names, {"input_ids": ids, "attention_mask": mask})
        return result

    def run_batch(self, rows: list[Row]) -> list[RowOutput]:
        """Run one batch (worker thread) and split its outputs per text."""
        started = time.perf_counter()
        ids, mask = pad_ids([row.job.encoded.ids[row.index] for row in rows], self._pad_id)
        want_attention = any(row.job.wants_attention for row in rows)
        outputs = self.run_padded(ids, mask, want_attention)
        logits = outputs[0]  # [B, C]
        probabilities = softmax(logits)  # [B, C]
        attention = as_layers(outputs[1], self.kind) if want_attention else None
        results = []
        for i, row in enumerate(rows):
            job = row.job
            weights = top = None
            if attention is not None and job.wants_attention:
                mode = job.mode if job.mode != AttentionMode.NONE else AttentionMode.POOLED
                extracted = extract(attention, self.kind, i, row.length, mode)
                weights = extracted if job.mode != AttentionMode.NONE else None
                top = top_k(importance(extracted), job.top_k) if job.top_k else None
            results.append(RowOutput(logits[i], probabilities[i], weights, top))
        m = self.metrics
        size, tokens = ids.shape[0], ids.size
        m.batch_size.observe(size)
        m.batch_tokens.observe(tokens)
        m.padding_ratio.observe(1.0 - float(sum(row.length for row in rows)) / tokens)
        m.inference.observe(time.perf_counter() - started)
        return results

    def start(self) -> None:
        self.batcher.start()

    async def close(self) -> None:
        await self.batcher.close()


def _check_golden(model: LoadedModel) -> None:
    cases = model.manifest.golden
    if not cases:
        log.warning("%s v%d: bundle has no golden cases; outputs are unchecked", model.name, model.version)
        return
    singles = []
    for number, case in enumerate(cases):
        where = f"golden case {number} ({case.text[:40]!r})"
        try:
            encoded = model.encoder.encode([case.text])
        except InvalidArgument as exc:
            raise LoadError(f"{where}: cannot be encoded: {exc.message}") from None
        ids = list(encoded.ids[0])
        if case.input_ids is not None and ids != case.input_ids:
            raise LoadError(
                f"{where}: tokenizer gives ids {ids[:12]}…, bundle expects {case.input_ids[:12]}…"
            )
        feed, mask = pad_ids([ids], model.manifest.pad_id)
        outputs = model.run_padded(feed, mask, attention=case.attention is not None)
        _compare(where, "logits", outputs[0][0], np.asarray(case.logits, np.float32), case.tolerance)
        expected = case.attention_array()
        if expected is not None:
            _compare(where, "attention", outputs[1][0], expected, case.tolerance)
        singles.append((ids, outputs[0][0], case.tolerance))
    if len(singles) > 1:
        feed, mask = pad_ids([ids for ids, _, _ in singles], model.manifest.pad_id)
        batched = model.run_padded(feed, mask, attention=False)[0]
        for i, (_, alone, tolerance) in enumerate(singles):
            _compare(f"golden case {i} in a padded batch", "logits", batched[i], alone, tolerance)


def _compare(where: str, what: str, actual: np.ndarray, expected: np.ndarray, tolerance: float) -> None:
    if actual.shape != expected.shape:
        raise LoadError(f"{where}: {what} has shape {list(actual.shape)}, expected {list(expected.shape)}")
    worst = float(np.max(np.abs(actual - expected))) if actual.size else 0.0
    if not worst <= tolerance:  # also catches NaN
        raise LoadError(f"{where}: {what} differ by {worst:.3g} (tolerance {tolerance:g})")


def _warm_up(model: LoadedModel, batch: int) -> None:
    width = min(model.manifest.max_len, 16)
    for rows, length in ((1, 1), (batch, width)):
        ids = np.full((rows, length), 1, dtype=np.int64)
        model.run_padded(ids, np.ones_like(ids), attention=model.kind != "none")


def load_model(
    directory: Path,
    settings: Settings,
    metrics: Metrics,
    *,
    name: str,
    version: int,
    on_cpu_fallback: Callable[[], None] | None = None,
) -> LoadedModel:
    """Verify, load, warm up and golden-check one version (blocking: run it off the event loop)."""
    try:
        bundle = read_bundle(directory, expect_name=name, expect_version=version)
        manifest = bundle.manifest
        encoder = TextEncoder(
            bundle.tokenizer_path,
            manifest.max_len,
            reject_long=settings.long_text == "reject",
            max_text_chars=settings.max_text_chars,
        )
        runtime = create_session(bundle.model_path, settings, on_cpu_fallback, label=f"{name} v{version}")
        check_io(manifest, runtime.session)
    except DeviceError:
        raise  # a device problem is the server's, not this version's: fatal at start-up
    except BundleError as exc:
        raise LoadError(str(exc)) from None
    except (ValueError, OSError) as exc:
        raise LoadError(f"{name} v{version}: {exc}") from None
    except Exception as exc:  # onnxruntime raises its own types for a corrupt or unloadable graph
        raise LoadError(f"{name} v{version}: onnxruntime cannot load model.onnx: {exc}") from None
    limits = BatchLimits(
        max_batch_size=settings.max_batch_size,
        max_batch_tokens=settings.max_batch_tokens,
        max_delay_s=settings.max_delay_ms / 1000.0,
        max_queue=settings.max_queue,
        max_concurrent=settings.max_concurrent_batches,
    )
    bound = metrics.bind_model(name, version, manifest.family, runtime.provider)
    model = LoadedModel(bundle=bundle, encoder=encoder, runtime=runtime, metrics=bound, limits=limits)
    try:
        _warm_up(model, min(settings.max_batch_size, 8))
        _check_golden(model)
    except LoadError:
        bound.unbind()
        raise
    except Exception as exc:
        bound.unbind()
        raise LoadError(f"{name} v{version}: the model fails to run: {exc}") from None
    return model
