"""Bidirectional streams: one reply per request, in order, up to `stream_window` requests in
progress at once; a failing request gets an error reply and the stream goes on.

Draining: requests read before the drain are answered; requests that arrive after it get
an UNAVAILABLE error reply at once (the client learns which were not served) until the
client half-closes or stays quiet for DRAIN_QUIET_SECONDS (at most REFUSAL_READ_SECONDS);
then the stream ends UNAVAILABLE. Ending a stream while a request is arriving makes grpc
report INTERNAL to the client, hence the reading before the end.

Replies are written with `context.write` rather than yielded: a client that stops reading
and then cancels makes the pending write fail inside grpc, which grpc logs with a traceback
unless the cancellation reached it first; the handler waits for that cancellation instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from functools import partial

import grpc

from attnserve.service.api.grpc.auth import bearer
from attnserve.service.api.grpc.wire import (
    REFUSAL_READ_SECONDS,
    Context,
    Handler,
    M,
    parsed,
    refuse,
    refuse_stream,
)
from attnserve.service.calls.call import CallLayer
from attnserve.service.calls.record import Call
from attnserve.service.calls.route import Routes
from attnserve.service.engine.admission import Permit
from attnserve.service.errors import SHUTTING_DOWN_MESSAGE, ServiceError, Unavailable
from attnserve.service.observe.propagation import TraceParent, extract_metadata

log = logging.getLogger(__name__)

DRAIN_QUIET_SECONDS = 0.1
CANCEL_WAIT_SECONDS = 2.0  # after a failed write: how long to wait for grpc's cancellation
_DRAINED, _END = object(), object()


def stream_handler(
    layer: CallLayer,
    routes: Routes,
    message_type: type[M],
    handler: Handler[M],
    error_reply: Callable[[bytes, ServiceError], bytes],
    span_name: list[str] | None = None,
) -> grpc.RpcMethodHandler[bytes, bytes]:
    """The stream is a call of its own on `routes.stream` (its permit, held while it is open);
    each message is an inference call within it."""
    gate = layer.core.gate
    window = layer.core.settings.stream_window

    async def one(raw: bytes, context: Context, stream: Permit, parent: TraceParent | None) -> bytes:
        """One request of the stream: a call of its own, with a permit within the stream's; traced, a
        span of its own, a child of the trace context the stream was opened with."""
        name = span_name[0] if span_name else ""
        work = partial(parsed, message_type, handler, raw, context)
        result = await layer.serve(
            routes.inference, work, timeout=context.time_remaining(), name=name, parent=parent, size=len(raw),
            within=stream,
        )  # fmt: skip
        return result if isinstance(result, bytes) else error_reply(raw, result)

    async def read(
        requests: AsyncIterator[bytes],
        context: Context,
        pending: asyncio.Queue[object],
        slots: asyncio.Semaphore,
        stream: Permit,
    ) -> None:
        loop = asyncio.get_running_loop()
        parent = extract_metadata(context.invocation_metadata()) if layer.tracing is not None else None
        try:
            async for raw in requests:
                if gate.draining:  # read after the drain began: refused, not served
                    pending.put_nowait(error_reply(raw, Unavailable(SHUTTING_DOWN_MESSAGE)))
                    continue
                pending.put_nowait(loop.create_task(one(raw, context, stream, parent)))
                await slots.acquire()  # at most `window` requests in progress
        except Exception:  # the client's side of the stream broke; the call is over
            log.debug("stream read failed", exc_info=True)
        pending.put_nowait(_END)

    async def write(context: Context, reply: bytes) -> bool:
        try:
            await context.write(reply)
        except Exception:  # the client went away; its cancellation reaches this task shortly
            await asyncio.sleep(CANCEL_WAIT_SECONDS)
            return False
        return True

    async def serve(requests: AsyncIterator[bytes], context: Context) -> None:
        token = bearer(context.invocation_metadata()) if layer.auth is not None else b""
        outcome = await layer.serve(routes.stream, partial(messages, requests, context), token=token)
        if isinstance(outcome, ServiceError):  # refused before it was served
            await refuse_stream(requests, context, outcome)

    async def messages(requests: AsyncIterator[bytes], context: Context, call: Call) -> None:
        stream = call.context.permit
        assert stream is not None  # the stream's route is gated
        pending: asyncio.Queue[object] = asyncio.Queue()
        slots = asyncio.Semaphore(window - 1)
        reader = asyncio.get_running_loop().create_task(read(requests, context, pending, slots, stream))

        def on_drain() -> None:
            pending.put_nowait(_DRAINED)

        gate.watch(on_drain)
        drained, drained_until = False, 0.0
        try:
            while True:
                if drained:
                    # Only refusals follow the marker: end once the client is quiet.
                    try:
                        async with asyncio.timeout(DRAIN_QUIET_SECONDS):
                            item = await pending.get()
                    except TimeoutError:
                        item = _END
                    if item is _END or asyncio.get_running_loop().time() > drained_until:
                        refuse(context, Unavailable(SHUTTING_DOWN_MESSAGE))
                        return
                else:
                    item = await pending.get()
                if item is _END:
                    return
                if item is _DRAINED:
                    drained, drained_until = True, asyncio.get_running_loop().time() + REFUSAL_READ_SECONDS
                    continue
                if isinstance(item, asyncio.Task):
                    reply: bytes = await item
                    slots.release()
                else:
                    assert isinstance(item, bytes)
                    reply = item
                if not await write(context, reply):
                    return
        finally:
            gate.unwatch(on_drain)
            reader.cancel()
            while not pending.empty():
                leftover = pending.get_nowait()
                if isinstance(leftover, asyncio.Task):
                    leftover.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    return grpc.stream_stream_rpc_method_handler(serve)
