"""The one error type of the service and its mapping to gRPC status codes.

Every failure a caller can see is a `ServiceError` carrying a `grpc.StatusCode` and a
message that names the field and the limit. Messages never contain file paths, tracebacks
or class names; anything unexpected is logged with its traceback and answered INTERNAL
with a fixed message (never UNKNOWN).
"""

from __future__ import annotations

import grpc


class ServiceError(Exception):
    """A failure answered to the caller with `code` and `message`."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if self.code in (grpc.StatusCode.OK, grpc.StatusCode.UNKNOWN):
            raise ValueError(f"ServiceError cannot carry {self.code.name}")

    @property
    def code_name(self) -> str:
        return self.code.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.name}, {self.message!r})"


class InvalidArgument(ServiceError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(ServiceError):
    code = grpc.StatusCode.NOT_FOUND


class ResourceExhausted(ServiceError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(ServiceError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(ServiceError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Cancelled(ServiceError):
    code = grpc.StatusCode.CANCELLED


class Internal(ServiceError):
    code = grpc.StatusCode.INTERNAL


INTERNAL_MESSAGE = "internal error; the server log has the details"
SHUTTING_DOWN = Unavailable("the server is shutting down; retry on another replica")
NOT_READY = Unavailable("the server is starting and has not loaded its models yet; retry shortly")


def as_service_error(exc: BaseException) -> ServiceError:
    """Map any exception to the error the caller sees (unexpected ones become INTERNAL)."""
    if isinstance(exc, ServiceError):
        return exc
    return Internal(INTERNAL_MESSAGE)


class StartupError(Exception):
    """The server cannot start with its settings (a certificate, a token file...); the message says why."""
