"""A blocking client of the admin API (`attnserve.v1.Admin`, served with `--admin`).

with AdminClient("127.0.0.1:50051", security=Security(token=admin_token)) as admin:
    admin.reload("car")      # {"car": {"loaded": [2], "refused": [], "removed": [1], "serving": [2]}}
    admin.unload("car")
"""

from __future__ import annotations

from types import TracebackType

import grpc
from attnserve.service.channels import PLAINTEXT, Security, open_channel
from attnserve.service.client import ClientError
from attnserve.service.proto.attnserve.v1 import admin_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["Admin"].full_name
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
        self._reload = self.channel.unary_unary(
            f"/{SERVICE}/Reload",
            request_serializer=pb.ReloadRequest.SerializeToString,
            response_deserializer=pb.ReloadResponse.FromString,
        )
        self._unload = self.channel.unary_unary(
            f"/{SERVICE}/Unload",
            request_serializer=pb.UnloadRequest.SerializeToString,
            response_deserializer=pb.UnloadResponse.FromString,
        )

    def reload(self, *models: str) -> dict[str, Change]:
        """Reload the named models (none named: every model); what changed, per model."""
        try:
            request = pb.ReloadRequest(models=models)
            reply = self._reload(request, timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as exc:
            raise ClientError.from_rpc(exc) from None
        return {change.model: _change(change) for change in reply.models}

    def unload(self, model: str) -> Change:
        try:
            reply = self._unload(pb.UnloadRequest(model=model), timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as exc:
            raise ClientError.from_rpc(exc) from None
        return _change(reply.model)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
