"""The native plane: attnserve's own API (list models, describe one, classify texts) over
plain values.

Both front ends of the API are adapters around one `NativePlane`, as the V2 front ends
are around the V2 plane: the native gRPC service `attnserve.v1.Classifier`
(api/grpc/native.py) and the JSON API (api/http/native.py). Each converts its wire form
to the types of types.py, calls the plane and converts the reply back; the engine call and
the reply are decided here once (the engine resolves the model and writes it into the call's
context). Nothing here knows a transport.
"""

from __future__ import annotations

import time

import numpy as np

from attnserve.service.api.native.types import (
    ClassifyReply,
    ClassifyRequest,
    TextResult,
    TextWindow,
    Timings,
    TokenWeight,
)
from attnserve.service.bundle import BundleManifest, Problem
from attnserve.service.calls.record import Call
from attnserve.service.common.model_info import AttentionInfo, ModelInfo, ThreadInfo, WindowsInfo
from attnserve.service.engine.core import Core
from attnserve.service.engine.limits import limits_info
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.request.attention import mode_shapes
from attnserve.service.engine.request.attribution import Explain, explained_label
from attnserve.service.engine.request.classify import Inputs
from attnserve.service.engine.request.results import Outputs


class NativePlane:
    def __init__(self, core: Core) -> None:
        self.core = core

    # --- models ---------------------------------------------------------------------------
    def list_models(self) -> list[ModelInfo]:
        """Every served model, its latest version."""
        return [self.describe(entry.latest) for entry in self.core.repository.models.values()]

    def model(self, name: str, version: int = 0) -> ModelInfo:
        """One model version (0: the latest)."""
        return self.describe(self.core.resolve(name, version))

    def describe(self, model: LoadedModel) -> ModelInfo:
        manifest, w = model.manifest, model.tokenizer.windows
        spec = manifest.attention
        settings = self.core.settings
        entry = self.core.repository.models.get(model.name)
        metrics = {
            f"{split}.{key}": float(value)
            for split, values in manifest.training_metrics.items()
            if isinstance(values, dict)
            for key, value in values.items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        }
        if manifest.calibration is not None:  # what the served probabilities divide the logits by
            c = manifest.calibration
            metrics |= {"calibration.temperature": c.temperature, "calibration.ece_before": c.ece_before,
                        "calibration.ece_after": c.ece_after}  # fmt: skip
        shapes = mode_shapes(spec.kind, spec.layers, spec.heads)
        return ModelInfo(
            name=model.name,
            version=model.version,
            versions=sorted(entry.versions) if entry else [model.version],
            family=manifest.family,
            labels=list(manifest.labels),
            max_len=manifest.max_len,
            attention=AttentionInfo(
                kind=spec.kind, layers=spec.layers, heads=spec.heads, modes=list(shapes), shapes=shapes
            ),
            limits=limits_info(settings),
            provider=model.provider,
            label_graph=label_graph_form(manifest),
            threads=ThreadInfo(
                intra_op=model.threads.intra_op,
                source=model.threads.source,
                one_thread_ms=model.threads.one_thread_ms,
                all_cores_ms=model.threads.all_cores_ms,
                cores=model.threads.cores,
            ),
            metrics=metrics,
            created_at=manifest.created_at.isoformat(),
            problem_type=model.scoring.problem.value,
            thresholds=list(model.scoring.thresholds or ()),
            windows=WindowsInfo(w.window, w.stride, w.combine, w.max_windows),
        )

    # --- classify -------------------------------------------------------------------------
    async def classify(self, request: ClassifyRequest, call: Call) -> ClassifyReply:
        """Classify the request's texts: one result per text, in order. The engine resolves the
        model, unless the attribution names a label (checked against the model's first)."""
        if request.request_id:
            call.name_request(request.request_id)
        context = call.context
        model: LoadedModel | str = request.model
        label = None
        if request.attribution_label:
            model = self.core.resolve(request.model, request.version, context)
            label = explained_label(model.labels, request.attribution_label, model.name)
        explain = Explain(request.attribution, request.attribution_budget, label)
        inputs = Inputs(texts=request.texts, mode=request.attention, top_k=request.top_k, explain=explain,
                        long_text=request.long_text)  # fmt: skip
        out = await self.core.classify(model, inputs, context, request.version)
        assert context.model is not None  # the engine wrote the version it resolved
        return reply(context.model, request, out, call.started)


def reply(model: LoadedModel, request: ClassifyRequest, out: Outputs, started: float) -> ClassifyReply:
    """The engine's outputs as the reply (`started`: the call's arrival, perf_counter)."""
    encoded, labels = out.encoded, model.labels
    label_ids = out.label_ids.tolist()
    logits, probabilities = out.logits.tolist(), out.probabilities.tolist()
    scoring = model.scoring
    assigned = values = None
    if scoring.problem is not Problem.SINGLE_LABEL:  # a softmax's replies carry neither
        chosen = scoring.assigned(out.probabilities)  # [k, C] multi-label only
        assigned = None if chosen is None else [[labels[j] for j in np.flatnonzero(row)] for row in chosen]
        values = [row[0] for row in probabilities] if scoring.regression else None
    windows = out.windows
    attention, top_tokens = out.attention, out.top_tokens
    attribution, attribution_rows = out.attribution, out.attribution_rows
    results = []
    for i, label_id in enumerate(label_ids):
        tokens, offsets, special = encoded.row(i)
        top: list[TokenWeight] = []
        if top_tokens is not None:
            index, weight = top_tokens[i]
            top = [
                TokenWeight(index=j, token=tokens[j], weight=w)
                for j, w in zip(index.tolist(), weight.tolist(), strict=True)
            ]
        results.append(
            TextResult(
                label=labels[label_id],
                label_id=label_id,
                probabilities=probabilities[i] if values is None else [],
                logits=logits[i],
                tokens=tokens,
                offsets=offsets,
                special=special,
                truncated=encoded.truncated[i],
                attention=None if attention is None else attention[i],
                top_tokens=top,
                answered_by=None if out.answered_by is None else out.answered_by[i],
                attribution=None if attribution is None else attribution[i].tolist(),
                attribution_rows=None if attribution_rows is None else attribution_rows[i],
                assigned=None if assigned is None else assigned[i],
                value=None if values is None else values[i],
                windows=None
                if windows is None
                else [
                    TextWindow(w.start, w.end, w.probabilities.tolist(), w.weight, w.attribution)
                    for w in windows[i]
                ],
            )
        )
    timings = out.timings
    return ClassifyReply(
        model=model.name,
        version=model.version,
        labels=list(labels),
        attention=request.attention,
        request_id=request.request_id,
        attribution=request.attribution,
        results=results,
        timings=Timings(
            tokenize_us=int(timings.tokenize * 1e6),
            queue_us=int(timings.queue * 1e6),
            inference_us=int(timings.inference * 1e6),
            total_us=int((time.perf_counter() - started) * 1e6),
            attribution_us=int(timings.attribution * 1e6),
        ),
    )


def label_graph_form(manifest: BundleManifest) -> str:
    """ "int8" or "float32" for a version with a label graph, "" without one."""
    graph = manifest.label_graph
    if graph is None:
        return ""
    return "float32" if graph.quantization is None else "int8"
