"""A blocking client of the admin API (`attnserve.v1.Admin`, served with `--admin`).

with AdminClient("127.0.0.1:50051", security=Security(token=admin_token)) as admin:
    admin.reload("car")      # {"car": {"loaded": [2], "refused": [], "removed": [1], "serving": [2]}}
    admin.unload("car")
"""

from __future__ import annotations

from types import TracebackType

from attnserve.service.client.channels import PLAINTEXT, Security, open_channel
from attnserve.service.client.messages import rpc_errors
from attnserve.service.client.stubs import unary
from attnserve.service.client.tracecontext import with_trace
from attnserve.service.proto.attnserve.v1 import admin_pb2 as pb

ADMIN = pb.DESCRIPTOR.services_by_name["Admin"]
Change = dict[str, list[int]]


def _change(change: pb.ModelChange) -> Change:
    return {
        "loaded": list(change.loaded),
        "refused": list(change.refused),
        "removed": list(change.removed),
        "serving": list(change.serving),
    }


class AdminClient:
    def __init__(self, target: str, *, timeout: float = 300.0, security: Security = PLAINTEXT) -> None:
        self.timeout = timeout
        self.metadata = security.metadata
        self.channel = open_channel(target, security)
        self._reload = unary(self.channel, ADMIN, "Reload")
        self._unload = unary(self.channel, ADMIN, "Unload")

    def reload(self, *models: str) -> dict[str, Change]:
        """Reload the named models (none named: every model); what changed, per model."""
        with rpc_errors():
            request = pb.ReloadRequest(models=models)
            reply = self._reload(request, timeout=self.timeout, metadata=with_trace(self.metadata))
        return {change.model: _change(change) for change in reply.models}

    def unload(self, model: str) -> Change:
        with rpc_errors():
            reply = self._unload(
                pb.UnloadRequest(model=model), timeout=self.timeout, metadata=with_trace(self.metadata)
            )
        return _change(reply.model)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
