"""Python clients of attnserve: `Client` (blocking), `AsyncClient` (asyncio), `AdminClient`."""

from attnserve.service.client.admin import AdminClient
from attnserve.service.client.aio import AsyncClient
from attnserve.service.client.channels import PLAINTEXT, Security
from attnserve.service.client.messages import (
    Classification,
    ClientError,
    ModelInfo,
    TextResult,
    TopToken,
    build_request,
)
from attnserve.service.client.sync import Client

__all__ = [
    "PLAINTEXT",
    "AdminClient",
    "AsyncClient",
    "Classification",
    "Client",
    "ClientError",
    "ModelInfo",
    "Security",
    "TextResult",
    "TopToken",
    "build_request",
]
