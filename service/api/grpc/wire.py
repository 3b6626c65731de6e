"""A gRPC call's bytes and status: parsing a body for its handler, serializing a reply,
answering with a status without raising. Shared by unary handlers (handlers.py) and streams
(streams.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from attnserve.service.api.grpc.status import grpc_code
from attnserve.service.calls.record import Call
from attnserve.service.errors import InvalidArgument, ServiceError

M = TypeVar("M", bound=Message)
REFUSAL_READ_SECONDS = 0.5
EXPIRED_WAIT_SECONDS = 1.0
Context = grpc.aio.ServicerContext[bytes, bytes]
Handler = Callable[[M, Context, Call], Awaitable[bytes]]


def parse(message_type: type[M], raw: bytes) -> M:
    try:
        return message_type.FromString(raw)
    except DecodeError:
        raise not_a(message_type) from None


def not_a(message_type: type[Message]) -> InvalidArgument:
    """The refusal of a body that does not parse as `message_type`."""
    return InvalidArgument(
        f"request body is not a valid {message_type.DESCRIPTOR.full_name} message "
        "(corrupt protobuf or invalid UTF-8 in a string field)"
    )


async def parsed(
    message_type: type[M], handler: Handler[M], raw: bytes, context: Context, call: Call
) -> bytes:
    """A call's work: its body parsed as `message_type` (as `parse`, written out: one call
    fewer on every unary call) and handed to `handler`."""
    try:
        message = message_type.FromString(raw)
    except DecodeError:
        raise not_a(message_type) from None
    return await handler(message, context, call)


async def answer(context: Context, result: bytes | ServiceError) -> bytes:
    """A unary call's reply bytes, or its refusal's status set (`refuse`), once grpc has had
    the chance to cancel a call whose deadline passed.

    grpc's core cancels such a call on its own; a reply sent meanwhile races that
    cancellation, and when the failed send is seen first grpc logs an "ExecuteBatchError raised
    in core" traceback for an ordinary timeout. grpc cancels the handler's task as soon as the
    core reports the call closed, so the reply is never sent; after EXPIRED_WAIT_SECONDS
    without that, it is sent after all."""
    remaining = context.time_remaining()
    if remaining is not None and remaining <= 0:
        await asyncio.sleep(EXPIRED_WAIT_SECONDS)
    return result if isinstance(result, bytes) else refuse(context, result)


def to_bytes(message: Message) -> bytes:
    """A reply message serialized (handlers are registered with no response serializer)."""
    data: bytes = message.SerializeToString()
    return data


def refuse(context: Context, error: ServiceError) -> bytes:
    """Answer a call with `error`'s status without raising.

    `context.abort` keeps its AbortError on the call's state, and through the error's
    traceback the handler's frame, which holds the context (and so the call state) and the
    request body: a reference cycle per refused call that only the cyclic collector frees
    (docs/results/reliability.md, "Where the gaps were"). grpc sends the status set here and
    discards the (empty) reply of a unary call."""
    context.set_code(grpc_code(error.code))
    context.set_details(error.message)
    return b""


async def refuse_stream(requests: AsyncIterator[object], context: Context, error: ServiceError) -> None:
    """End a streaming call with `error` before serving it.

    The messages the client is still sending are read first (for at most
    REFUSAL_READ_SECONDS): ending the call while one is arriving makes grpc report INTERNAL
    ("Internal error from Core") to the client instead of `code` (docs/results/reliability.md)."""
    with contextlib.suppress(Exception):  # the time is up, or the client went away
        async with asyncio.timeout(REFUSAL_READ_SECONDS):
            async for _ in requests:
                pass
    refuse(context, error)
