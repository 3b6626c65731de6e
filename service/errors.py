"""The one error type of the service, carrying a transport-neutral status.

Every failure a caller can see is a `ServiceError` carrying a `Status` and a message that
names the field and the limit. Messages never contain file paths, tracebacks or class
names; anything unexpected is logged with its traceback and answered INTERNAL with a fixed
message (never UNKNOWN). Each transport maps `Status` once: gRPC in `api/grpc/status.py`.
"""

from __future__ import annotations

import enum


class Status(enum.Enum):
    """The statuses a call can end with; names and numbers are gRPC's canonical codes."""

    OK = 0
    CANCELLED = 1
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    UNAUTHENTICATED = 16


class ServiceError(Exception):
    """A failure answered to the caller with `code` and `message`. `field` names the request
    field at fault ("texts", "attention", ...) when there is one, so a front end that spells
    fields its own way can reword the refusal without reading the message."""

    code: Status = Status.INTERNAL

    def __init__(self, message: str, code: Status | None = None, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code
        if self.code is Status.OK:
            raise ValueError("ServiceError cannot carry OK")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.name}, {self.message!r})"


class InvalidArgument(ServiceError):
    code = Status.INVALID_ARGUMENT


class NotFound(ServiceError):
    code = Status.NOT_FOUND


class ResourceExhausted(ServiceError):
    code = Status.RESOURCE_EXHAUSTED


class ReplyTooLarge(ResourceExhausted):
    """The reply would exceed max_reply_bytes: the same request fails again, so no retry is advised."""


class BodyTooLarge(ResourceExhausted):
    """A request body over its route's size limit (both transports; HTTP answers it 413): the
    same request fails again, so no retry is advised."""


class Unavailable(ServiceError):
    code = Status.UNAVAILABLE


class DeadlineExceeded(ServiceError):
    code = Status.DEADLINE_EXCEEDED


class Internal(ServiceError):
    code = Status.INTERNAL


INTERNAL_MESSAGE = "internal error; the server log has the details"
SHUTTING_DOWN_MESSAGE = "the server is shutting down; retry on another replica"
NOT_READY_MESSAGE = "the server is starting and has not loaded its models yet; retry shortly"
UNLOADING_MESSAGE = "the model version is being unloaded; retry"


def detached(error: ServiceError) -> ServiceError:
    """`error` without its traceback and chained exceptions, to be kept or answered.

    A caught exception's traceback holds the frames it passed through, and with them the
    request body; a frame that keeps the exception in a local closes a reference cycle that
    only the cyclic collector frees (docs/results/reliability.md, "Where the gaps were").
    Raising one shared instance again and again would also grow its traceback without end,
    so refusals are new instances, detached once caught. The error itself, its `field`
    included, is kept as it is."""
    error.__traceback__ = None
    error.__context__ = None
    error.__cause__ = None
    return error


class StartupError(Exception):
    """The server cannot start with its settings (a certificate, a token file...); the message says why."""
