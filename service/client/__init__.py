"""Python clients of attnserve: `Client` (blocking), `AsyncClient` (asyncio), `AdminClient`;
`classify_file` for CSV, JSONL and Parquet files."""

from attnserve.service.client.admin import AdminClient
from attnserve.service.client.aio import AsyncClient
from attnserve.service.client.channels import PLAINTEXT, Security
from attnserve.service.client.files import FileError, FileJob, JobReport, classify_file
from attnserve.service.client.messages import (
    Classification,
    ClientError,
    TextResult,
    TextWindow,
    TopToken,
    build_request,
)
from attnserve.service.client.sync import Client
from attnserve.service.common.model_info import ModelInfo

__all__ = [
    "PLAINTEXT",
    "AdminClient",
    "AsyncClient",
    "Classification",
    "Client",
    "ClientError",
    "FileError",
    "FileJob",
    "JobReport",
    "ModelInfo",
    "Security",
    "TextResult",
    "TextWindow",
    "TopToken",
    "build_request",
    "classify_file",
]
