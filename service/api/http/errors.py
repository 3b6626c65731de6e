"""The HTTP mapping of the service's statuses (the one place they meet HTTP status codes).

Two error bodies exist: the JSON API's `{"error": {"code": "INVALID_ARGUMENT", "message":
...}}`, and the V2 protocol's `{"error": "<message>"}` (KServe and Triton define the error
as a string; tritonclient reads it as one). Both carry the same HTTP status for a status.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from attnserve.service.errors import BodyTooLarge, ReplyTooLarge, ServiceError, Status

HTTP_STATUS = {
    Status.CANCELLED: 499,  # the client closed the request (nginx's convention)
    Status.INVALID_ARGUMENT: 400,
    Status.DEADLINE_EXCEEDED: 504,
    Status.NOT_FOUND: 404,
    Status.PERMISSION_DENIED: 403,
    Status.RESOURCE_EXHAUSTED: 429,
    Status.FAILED_PRECONDITION: 400,
    Status.UNIMPLEMENTED: 501,
    Status.INTERNAL: 500,
    Status.UNAVAILABLE: 503,
    Status.UNAUTHENTICATED: 401,
}


class HttpError(ServiceError):
    """A refusal the HTTP layer decides itself, with a more precise HTTP status than its code's."""

    def __init__(self, message: str, code: Status, http_status: int) -> None:
        super().__init__(message, code)
        self.http_status = http_status


def read_timeout(seconds: float) -> HttpError:
    return HttpError(
        f"request body: not received within {seconds:g} s (--http-read-timeout-s)",
        Status.DEADLINE_EXCEEDED,
        408,
    )


def not_found_route(path: str) -> HttpError:
    return HttpError(f"no such route: {path[:200]}", Status.NOT_FOUND, 404)


def method_not_allowed(method: str, path: str) -> HttpError:
    return HttpError(f"method {method[:16]} is not allowed on {path[:200]}", Status.UNIMPLEMENTED, 405)


def http_status(error: ServiceError) -> int:
    if isinstance(error, HttpError):
        return error.http_status
    if isinstance(error, BodyTooLarge):  # the call layer's refusal of a body over its route's limit
        return 413
    return HTTP_STATUS[error.code]


def api_error(error: ServiceError, headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": {"code": error.code.name, "message": error.message}}
    return JSONResponse(body, status_code=http_status(error), headers=_headers(error, headers))


def v2_error(error: ServiceError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": error.message}, status_code=http_status(error), headers=_headers(error, headers)
    )


def _headers(error: ServiceError, extra: dict[str, str] | None) -> dict[str, str]:
    headers = dict(extra or {})
    if error.code is Status.UNAUTHENTICATED:
        headers.setdefault("WWW-Authenticate", 'Bearer realm="attnserve"')
    elif _retryable(error):
        headers.setdefault("Retry-After", "1")
    return headers


def _retryable(error: ServiceError) -> bool:
    """Overload and unavailability pass; a body or reply over a size limit fails again as sent."""
    if error.code not in (Status.UNAVAILABLE, Status.RESOURCE_EXHAUSTED):
        return False
    return not isinstance(error, BodyTooLarge | ReplyTooLarge)
