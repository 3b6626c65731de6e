"""The gRPC mapping of the service's statuses (the one place they meet grpc.StatusCode)."""

from __future__ import annotations

import grpc

from attnserve.service.errors import Status

_CODES = {status: grpc.StatusCode[status.name] for status in Status}


def grpc_code(status: Status) -> grpc.StatusCode:
    return _CODES[status]
