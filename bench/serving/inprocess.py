"""attnserve's own cost per single-text call with gRPC taken out: the engine and the V2 handler.

A `Server` that never listens serves the bundle in this process; asyncio callers drive
`Core.classify` (`engine`) or the V2 `ModelInfer` handler as grpc.aio calls it (`v2`). Spans go
to kit's OTLP receiver in another process (SINK), so only the sender's CPU counts."""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import grpc

from attnserve.service.bundle.layout import RepositoryError
from attnserve.service.engine.context import CallContext
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.request.classify import Inputs
from attnserve.service.errors import ServiceError
from attnserve.service.server import Server
from attnserve.service.settings import Settings
from bench import sections
from bench.serving.ceiling import model_cpu_per_text
from bench.serving.profiling import thread_cpu
from bench.serving.texts import exact_length_texts
from kit.launch import ROOT, run_async
from kit.load import callers
from kit.results import Point
from kit.v2 import MODEL_INFER, text_request

TEXTS, TOKENS = 32, 16
Call = Callable[[int], Awaitable[None]]
SINK = """
import sys
from kit.otlp import OtlpReceiver
with OtlpReceiver() as receiver:
    print(receiver.grpc_port, flush=True)
    sys.stdin.read()
    print(len(receiver.spans), flush=True)
"""  # prints its port, receives until stdin closes, then prints the spans received


class _Context:
    """What the V2 handler reads of a grpc.aio context on the success path; an error is a bug here."""

    def time_remaining(self) -> None:
        return None

    def set_code(self, code: object) -> None:
        raise RuntimeError(f"the handler answered {code}")

    def set_details(self, details: str) -> None:
        raise RuntimeError(details)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()  # no caller's trace context: the sampling ratio decides


class _Details:
    method = MODEL_INFER
    invocation_metadata = ()


def _batches(server: Server, model: LoadedModel) -> tuple[float, float]:
    """(rows, batches) the model has run so far, from its batch-size histogram."""
    labels = {"model": model.name, "version": str(model.version)}
    rows, batches = (server.registry.get_sample_value(f"attnserve_batch_size_{part}", labels)
                     for part in ("sum", "count"))  # fmt: skip
    if rows is None or batches is None:
        raise RuntimeError("the model's attnserve_batch_size histogram is missing")
    return rows, batches


def tracing_values(text: str) -> list[float | None]:
    """`off,1,0.01` -> [None, 1.0, 0.01]; a ValueError (reported by argparse) for anything else."""
    values = [None if item == "off" else float(item) for item in text.split(",")]
    if any(value is not None and not 0.0 <= value <= 1.0 for value in values):
        raise ValueError(f"{text}: a sampling ratio is in [0, 1]")
    return values


@contextlib.contextmanager
def otlp_sink() -> Iterator[str]:
    """kit's OTLP receiver in a process of its own: its endpoint; the spans it got, printed at the end."""
    process = subprocess.Popen([sys.executable, "-c", SINK], cwd=ROOT, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert process.stdout is not None
    if not (line := process.stdout.readline()).strip().isdigit():
        process.kill()
        raise RuntimeError(f"the OTLP sink did not start: {line!r}")
    try:
        yield f"http://127.0.0.1:{int(line)}"
    finally:
        spans = process.communicate(timeout=30)[0].split()[-1]
        print(f"  spans received by the OTLP receiver: {spans}", flush=True)


async def measure(
    repository: Path, name: str, levels: list[int], calls: int, layers: list[str], *,
    tracing: float | None = None, otlp_endpoint: str | None = None,
) -> list[Point]:  # fmt: skip
    """The points of one server: tracing off (`tracing` None) or on at that sampling ratio."""
    # a dict: mypy, without pydantic's plugin, reads every field as a required argument
    values: dict[str, Any] = {"repository": repository, "metrics": False}
    if tracing is not None:
        values |= {"tracing": True, "trace_sample_ratio": tracing, "otlp_endpoint": otlp_endpoint,
                   "otlp_protocol": "grpc"}  # fmt: skip
    server = Server(Settings(**values), serve_metrics=False)
    await server.load()
    try:
        model = server.core.repository.resolve(name)
        texts = exact_length_texts(model.bundle.tokenizer_path, TOKENS, TEXTS)
        (v2,) = [api for api in server.apis if api.service_name.startswith("inference.")]
        method = v2.handler().service(cast(grpc.HandlerCallDetails, _Details()))
        if method is None or method.unary_unary is None:
            raise RuntimeError("the V2 API has no unary ModelInfer handler")
        # grpc's stubs type the sync signature; grpc.aio calls the same handler and awaits it
        handler = cast(Callable[[bytes, object], Awaitable[bytes]], method.unary_unary)
        raws = [text_request(name, [text]).SerializeToString() for text in texts]
        context = _Context()

        async def engine_call(index: int) -> None:
            permit = server.core.gate.try_acquire_permit()
            try:
                await server.core.classify(model, Inputs(texts=[texts[index % TEXTS]]), CallContext(permit))
            finally:
                permit.release()

        async def v2_call(index: int) -> None:
            if not isinstance(await handler(raws[index % TEXTS], context), bytes):
                raise RuntimeError("the V2 handler returned no reply bytes")

        calls_of: dict[str, Call] = {"engine": engine_call, "v2": v2_call}
        points = []
        for layer in layers:
            for concurrency in levels:
                await _run(calls_of[layer], concurrency, min(calls, 200))  # warm
                points.append(await _point(server, model, layer, calls_of[layer], concurrency, calls, texts))
                print(_line(points[-1]), flush=True)
        return points
    finally:
        await server.shutdown(0)


async def _run(call: Call, concurrency: int, calls: int) -> None:
    left = [calls]  # shared: each caller takes the next call's index

    async def step(_: int) -> None:
        left[0] -= 1
        await call(calls - 1 - left[0])

    await callers(concurrency, step, lambda: left[0] > 0)


async def _point(
    server: Server, model: LoadedModel, layer: str, call: Call, concurrency: int, calls: int, texts: list[str]
) -> Point:
    loop_thread = threading.get_native_id()
    rows0, batches0 = _batches(server, model)
    before, started = thread_cpu(os.getpid()), time.perf_counter()
    await _run(call, concurrency, calls)
    if server.tracing is not None:  # the spans of these calls exported within the point
        server.tracing.force_flush()
    after, elapsed = thread_cpu(os.getpid()), time.perf_counter() - started
    rows1, batches1 = _batches(server, model)
    loop = after.get(loop_thread, 0.0) - before.get(loop_thread, 0.0)
    others = sum(v - before.get(tid, 0.0) for tid, v in after.items() if tid != loop_thread)
    mean = (rows1 - rows0) / max(batches1 - batches0, 1.0)
    model_s = model_cpu_per_text(model.bundle.root, tuple(texts), max(round(mean), 1))
    cpu_ms = 1e3 * (loop + others) / calls
    tracing = "off" if server.tracing is None else f"{server.tracing.config.sample_ratio:g}"
    return Point(layer, concurrency, calls / elapsed, math.nan, math.nan, mean_batch=mean,
                 cpu_ms_per_call=cpu_ms, cpu_ms_per_call_no_model=cpu_ms - 1e3 * model_s,
                 cpu_ms_event_loop=1e3 * loop / calls, calls=calls, tracing=tracing)  # fmt: skip


def _line(p: Point) -> str:
    loop, model = p.cpu_ms_event_loop or 0.0, p.cpu_ms_per_call - (p.cpu_ms_per_call_no_model or 0.0)
    return (
        f"  {p.system:6s} c={p.concurrency:<3d} tracing {p.tracing:<5s} {p.rps:7.0f} calls/s  "
        f"cpu {p.cpu_ms_per_call:.3f} ms/call (event loop {loop:.3f}, other threads "
        f"{p.cpu_ms_per_call - loop:.3f}; model {model:.3f} at a mean batch of {p.mean_batch or 0:.1f})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = sections.parser("inprocess", __doc__, served=True)
    parser.add_argument("--levels", default="1,8,32", type=sections.ints, help="concurrencies, as 1,8,32")
    parser.add_argument("--calls", type=int, default=5000, help="calls a point")
    parser.add_argument("--layers", default="engine,v2", help="subset of: engine, v2")
    tracing = "off, or sampling ratios (1,0.01): a server each"
    parser.add_argument("--tracing", default="off", type=tracing_values, help=tracing)
    args = parser.parse_args(argv)
    layers = sections.subset(parser, args.layers, "layers", ("engine", "v2"))
    with contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(otlp_sink()) if any(v is not None for v in args.tracing) else None
        try:
            for value in args.tracing:
                run_async(measure(args.repository, args.model, args.levels, args.calls, layers, tracing=value,
                                  otlp_endpoint=endpoint))  # fmt: skip
        except (ServiceError, RepositoryError) as exc:  # no such model, or no repository there
            raise sections.Refused(str(exc)) from None
    return 0
