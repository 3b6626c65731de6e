"""The admin API `attnserve.v1.Admin`: reload and unload models by name.

Served only with `--admin`; under `--auth` only admin tokens may call it (calls/auth.py).
It never takes a path or URL: a model name must match `[A-Za-z0-9_.-]+`, contain no `..`
and not start with `.`, and it resolves to a folder inside the repository root (a symlink
leading outside is refused by the repository scan). The work is done by `Reloader`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import grpc

from attnserve.service.api.grpc.handlers import Handlers
from attnserve.service.api.grpc.wire import Context, refuse, to_bytes
from attnserve.service.bundle import valid_model_name
from attnserve.service.calls.auth import Tokens
from attnserve.service.calls.record import Call
from attnserve.service.engine.core import Core
from attnserve.service.engine.models.reload import ModelReport, Reloader
from attnserve.service.errors import InvalidArgument, ServiceError, Status
from attnserve.service.proto.attnserve.v1 import admin_pb2 as pb

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Admin"].full_name
MAX_NAMES = 256
T = TypeVar("T")


def check_name(field: str, name: str) -> str:
    if not valid_model_name(name) or len(name) > 128:
        raise InvalidArgument(
            f"{field}: {name[:64]!r} is not a model name ([A-Za-z0-9_.-]+, at most 128 characters, "
            "no '..', not starting with '.'); the admin API takes model names, never paths"
        )
    return name


def _change(report: ModelReport) -> pb.ModelChange:
    return pb.ModelChange(
        model=report.name,
        loaded=report.loaded,
        refused=report.refused,
        removed=report.removed,
        serving=report.serving,
    )


async def _shielded(work: Coroutine[Any, Any, T]) -> T:
    """`work`, which a caller that gives up must not cut in half (a swap of versions). Its
    outcome is retrieved even then: an error nobody awaits would be logged as "Task
    exception was never retrieved"."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(_retrieve)
    return await asyncio.shield(task)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


class AdminApi:
    """Handlers of `attnserve.v1.Admin`."""

    service_name = SERVICE_NAME

    def __init__(self, core: Core, reloader: Reloader, tokens: Tokens | None = None) -> None:
        self._reloader = reloader
        self._handlers = Handlers(core, "native", tokens)

    def handler(self) -> grpc.GenericRpcHandler[bytes, bytes]:
        handlers = self._handlers
        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "Reload": handlers.unary(pb.ReloadRequest, self.reload, handlers.routes.admin),
                "Unload": handlers.unary(pb.UnloadRequest, self.unload, handlers.routes.admin),
            },
        )

    async def reload(self, request: pb.ReloadRequest, context: Context, call: Call) -> bytes:
        if len(request.models) > MAX_NAMES:
            raise InvalidArgument(f"models: {len(request.models)} names; the limit is {MAX_NAMES}")
        names = [check_name(f"models[{i}]", name) for i, name in enumerate(request.models)]
        reports = await _shielded(self._reloader.reload(names or None))
        return to_bytes(pb.ReloadResponse(models=[_change(report) for report in reports]))

    async def unload(self, request: pb.UnloadRequest, context: Context, call: Call) -> bytes:
        report = await _shielded(self._reloader.unload(check_name("model", request.model)))
        return to_bytes(pb.UnloadResponse(model=_change(report)))


# Without --admin, grpc's own answer would be a bare "Method not found!".
ADMIN_OFF_MESSAGE = (
    "the admin API is off on this server: start it with --admin (ATTNSERVE_ADMIN=true; "
    "it needs --workers 1, and --auth unless the server listens on loopback only)"
)


def admin_off_handler() -> grpc.GenericRpcHandler[bytes, bytes]:
    """Answers every `attnserve.v1.Admin` method, when the admin API is off, with how to turn it on."""

    async def off(raw: bytes, context: Context) -> bytes:
        return refuse(context, ServiceError(ADMIN_OFF_MESSAGE, Status.UNIMPLEMENTED))

    methods = pb.DESCRIPTOR.services_by_name["Admin"].methods
    return grpc.method_handlers_generic_handler(
        SERVICE_NAME, {method.name: grpc.unary_unary_rpc_method_handler(off) for method in methods}
    )
