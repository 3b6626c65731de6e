"""What the call layer reports when a traced or logged call ends: its stage spans, its server
span's attributes and status, and its access line.

Nothing here runs for a call that is neither traced nor sampled for the access log: the
call layer tests `call.trace` and `AccessLog.enabled` first. The stage spans are written
after the fact from the times the engine measures anyway (service/engine/request/classify.py
`EngineTimings`): tokenize on `perf_counter`, queue and inference on the batcher's
`monotonic` readings, so the queue span ends exactly where its batch began.
"""

from __future__ import annotations

import time

from attnserve.service.calls.record import Call
from attnserve.service.engine.metrics import UNKNOWN_MODEL
from attnserve.service.engine.request.results import Outputs
from attnserve.service.errors import Status
from attnserve.service.observe.logs import AccessLog
from attnserve.service.observe.tracing import CallTrace


def finish_span(trace: CallTrace, call: Call, status: Status, ended: float) -> None:
    """The stage spans (when the engine ran) and the end of the call span (`ended`: perf_counter)."""
    context = call.context
    attributes: dict[str, str | int] = {"attnserve.texts": context.texts}
    model = None if context.model is None else context.model.metrics
    if model is not None:
        attributes["attnserve.model"] = model.name
        attributes["attnserve.model.version"] = int(model.version)
    out = context.outputs
    if out is not None:
        attributes["attnserve.tokens"] = stage_spans(trace, call.started, out, ended)
    trace.finish(status.name, attributes, ended=ended)


def stage_spans(trace: CallTrace, arrived: float, out: Outputs, ended: float) -> int:
    """parse (arrival to the engine), tokenize, queue (until the last of its texts' batches
    began), inference (to the end of its last batch; linked to every batch's span), attribution
    when one was asked (its rows' job, linked to their batches) and reply (to `ended`). Returns
    the call's token count."""
    t = out.timings
    tokens = sum(out.encoded.lengths)
    tokenized = t.started + t.tokenize
    began = t.enqueued + t.queue
    trace.stage("parse", arrived, t.started)
    trace.stage("tokenize", t.started, tokenized, {"attnserve.texts": len(out), "attnserve.tokens": tokens})
    trace.stage("queue", t.enqueued, began, clock=time.monotonic)
    trace.stage("inference", began, t.ran_until, links=out.batch_spans, clock=time.monotonic)
    if out.attribution_rows is not None:  # its rows ran after the texts', as one more job
        rows = {"attnserve.attribution.rows": sum(out.attribution_rows)}
        attributed = t.attribution_started + t.attribution
        trace.stage("attribution", t.attribution_started, attributed, rows, links=out.attribution_spans)
        trace.stage("reply", attributed, ended)
        return tokens
    # The reply starts on the batcher's clock and ends on the call's: both read as wall time.
    trace.stage("reply", t.ran_until, ended, start_clock=time.monotonic)
    return tokens


def access_line(access: AccessLog, transport: str, call: Call, status: Status, ended: float) -> None:
    """The call's access line (written only if the call is sampled)."""
    context = call.context
    model = None if context.model is None else context.model.metrics
    grpc = transport == "grpc"
    access(
        transport=transport,
        method=call.method.rpartition("/")[2] if grpc else call.method,
        model=model.name if model else UNKNOWN_MODEL,
        version=model.version if model else "",
        texts=context.texts,
        status=status.name,
        latency_s=ended - call.started,
        queue_s=None if context.outputs is None else context.outputs.timings.queue,
    )
