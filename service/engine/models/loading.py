"""One verified model version: bundle + tokenizer + onnxruntime session + its metrics.

`load_model` is the gate every version passes before it takes traffic: the bundle is
verified (files, sha256, schema), the session's inputs/outputs must match the manifest,
the session is warmed up and must reproduce the bundle's golden outputs, alone and inside
a padded batch. Any failure raises `LoadError` and the version is not served.

A `LoadedModel` is what the model lifecycle hands the request path, and all it hands it:
the request path (engine/request/predictor.py) builds the version's runner and batcher
when the repository starts serving it and closes them when it is unloaded. The checks here
run the session directly, never through a batcher.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnserve.service.bundle import (
    AttentionKind,
    Bundle,
    BundleError,
    BundleManifest,
    check_io,
    check_label_io,
    label_tolerance,
    read_bundle,
)
from attnserve.service.bundle.cascade import CascadeManifest
from attnserve.service.engine.metrics import Metrics, ModelMetrics
from attnserve.service.engine.models.runtime import DeviceError, RuntimeSession, create_session, pad_ids
from attnserve.service.engine.models.threads import ThreadChoice, choose_threads
from attnserve.service.engine.models.tokenization import TextTokenizer
from attnserve.service.errors import InvalidArgument
from attnserve.service.settings import Settings

log = logging.getLogger(__name__)


class LoadError(Exception):
    """A model version cannot be served; the message says why."""


@dataclass(eq=False)
class LoadedModel:
    """A version that passed every check (compared by identity: one object per load)."""

    bundle: Bundle
    tokenizer: TextTokenizer  # the bundle's tokenizer.json
    runtime: RuntimeSession
    threads: ThreadChoice  # the session's intra-op threads and why
    metrics: ModelMetrics  # bound at load, unbound when the version is retired
    # label.onnx (encoders): logits only, often int8; None: model.onnx answers every call
    label_runtime: RuntimeSession | None = None
    # A cascade version (models/cascade.py): its members and threshold; None for any other.
    cascade: CascadeMembers | None = None

    def __post_init__(self) -> None:
        manifest = self.manifest
        self.name = manifest.name
        self.version = manifest.version
        self.attention_spec = manifest.attention  # its kind, layers and heads: a reply's size
        self.attention_kind = manifest.attention.kind
        self.labels = tuple(manifest.labels)
        # Read once per load: the runner divides every batch's logits by it (bundle/calibration.py).
        self.temperature = manifest.calibration.temperature if manifest.calibration is not None else 1.0
        self.scoring = manifest.scores  # what its scores mean (bundle/scoring.py), read once per load

    @property
    def manifest(self) -> BundleManifest:
        return self.bundle.manifest

    @property
    def provider(self) -> str:
        return self.runtime.provider

    def session_for(self, attention: bool) -> RuntimeSession:
        """The graph that answers a batch: the label graph when none of it asks attention."""
        if attention or self.label_runtime is None:
            return self.runtime
        return self.label_runtime


@dataclass(frozen=True, eq=False)
class CascadeMembers:
    """What a served cascade runs: the student first, the teacher for texts under the threshold."""

    student: LoadedModel
    teacher: LoadedModel
    threshold: float
    manifest: CascadeManifest

    @property
    def members(self) -> tuple[LoadedModel, LoadedModel]:
        return (self.student, self.teacher)


def _check_golden(model: LoadedModel) -> None:
    cases = model.manifest.golden
    if not cases:
        log.warning("%s v%d: bundle has no golden cases; outputs are unchecked", model.name, model.version)
        return
    singles = []
    for number, case in enumerate(cases):
        where = f"golden case {number} ({case.text[:40]!r})"
        try:
            encoded = model.tokenizer.encode([case.text])
        except InvalidArgument as exc:
            raise LoadError(f"{where}: cannot be encoded: {exc.message}") from None
        ids = list(encoded.ids[0])
        if case.input_ids is not None and ids != case.input_ids:
            raise LoadError(
                f"{where}: tokenizer gives ids {ids[:12]}…, bundle expects {case.input_ids[:12]}…"
            )
        feed, mask = pad_ids([ids], model.manifest.pad_id)
        outputs = model.runtime.run(feed, mask, attention=case.attention is not None)
        _compare(where, "logits", outputs[0][0], np.asarray(case.logits, np.float32), case.tolerance)
        expected = case.attention_array()
        if expected is not None:
            _compare(where, "attention", outputs[1][0], expected, case.tolerance)
        singles.append((ids, outputs[0][0], case.tolerance))
    if len(singles) > 1:
        feed, mask = pad_ids([ids for ids, _, _ in singles], model.manifest.pad_id)
        batched = model.runtime.run(feed, mask, attention=False)[0]
        for i, (_, alone, tolerance) in enumerate(singles):
            _compare(f"golden case {i} in a padded batch", "logits", batched[i], alone, tolerance)
    if model.label_runtime is not None:
        _check_label_golden(model, model.label_runtime, [ids for ids, _, _ in singles])


def _check_label_golden(model: LoadedModel, label: RuntimeSession, rows: list[list[int]]) -> None:
    """The label graph gives each golden case's logits, alone and in a padded batch, within
    the int8 gate's tolerance when it is int8."""
    manifest = model.manifest
    expected = [np.asarray(case.logits, np.float32) for case in manifest.golden]
    tolerances = [label_tolerance(manifest, case.tolerance) for case in manifest.golden]
    for number, (ids, logits, tolerance) in enumerate(zip(rows, expected, tolerances, strict=True)):
        feed, mask = pad_ids([ids], manifest.pad_id)
        _compare(f"golden case {number}, label graph", "logits", label.run(feed, mask, False)[0][0], logits,
                 tolerance)  # fmt: skip
    if len(rows) > 1:
        feed, mask = pad_ids(rows, manifest.pad_id)
        batched = label.run(feed, mask, False)[0]
        for number, (logits, tolerance) in enumerate(zip(expected, tolerances, strict=True)):
            where = f"golden case {number} in a padded batch, label graph"
            _compare(where, "logits", batched[number], logits, tolerance)


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
        model.runtime.run(ids, np.ones_like(ids), attention=model.attention_kind != AttentionKind.NONE)
        if model.label_runtime is not None:
            model.label_runtime.run(ids, np.ones_like(ids), attention=False)


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
        tokenizer = TextTokenizer(
            bundle.tokenizer_path,
            manifest.max_len,
            reject_long=settings.long_text == "reject",
            max_text_chars=settings.max_text_chars,
            truncation=manifest.truncation,
            windows=manifest.long_texts,
        )
        # Once per version load, on the graph most calls reach: the label graph where there is one.
        threads = choose_threads(bundle.label_model_path or bundle.model_path, settings, manifest)
        log.info("%s v%d: %s", name, version, threads.describe())
        runtime = create_session(
            bundle.model_path,
            settings,
            on_cpu_fallback,
            intra_op_threads=threads.intra_op,
            spinning=threads.spinning,
            label=f"{name} v{version}",
        )
        check_io(manifest, runtime.session)
        label_runtime = None
        if bundle.label_model_path is not None:
            label_path, label = bundle.label_model_path, f"{name} v{version} labels"
            label_runtime = create_session(
                label_path,
                settings,
                intra_op_threads=threads.intra_op,
                spinning=threads.spinning,
                label=label,
            )
            check_label_io(manifest, label_runtime.session)
    except DeviceError:
        raise  # a device problem is the server's, not this version's: fatal at start-up
    except BundleError as exc:
        raise LoadError(str(exc)) from None
    except (ValueError, OSError) as exc:
        raise LoadError(f"{name} v{version}: {exc}") from None
    except Exception as exc:  # onnxruntime raises its own types for a corrupt or unloadable graph
        raise LoadError(f"{name} v{version}: onnxruntime cannot load model.onnx: {exc}") from None
    bound = metrics.bind_model(
        name,
        version,
        manifest.family,
        runtime.provider,
        tuple(manifest.labels),
        tokenizer.unk_id,
        manifest.data_profile,
        intra_op_threads=threads.intra_op,
    )
    model = LoadedModel(
        bundle=bundle,
        tokenizer=tokenizer,
        runtime=runtime,
        threads=threads,
        metrics=bound,
        label_runtime=label_runtime,
    )
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
