"""Client channels to an attnserve server: plaintext or TLS / mutual TLS, and the bearer token.

    security = Security(tls_ca=Path("ca.pem"), token=os.environ["ATTNSERVE_TOKEN"])
    Client("attnserve.example:50051", security=security)

`tls_ca` turns TLS on (the CA that signed the server's certificate); `tls_cert` + `tls_key`
add a client certificate for mutual TLS; `tls_server_name` checks the server's certificate
for that name instead of the target's host (e.g. when dialling an IP address). The token
travels as `authorization: Bearer <token>` metadata on every call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

Metadata = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Security:
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_server_name: str | None = None
    token: str | None = None

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together (a client certificate and its key)")
        if self.tls_cert is not None and self.tls_ca is None:
            raise ValueError("a client certificate needs tls_ca: mutual TLS runs over TLS")

    @property
    def metadata(self) -> Metadata:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def credentials(self) -> grpc.ChannelCredentials | None:
        if self.tls_ca is None:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=self.tls_ca.read_bytes(),
            private_key=self.tls_key.read_bytes() if self.tls_key else None,
            certificate_chain=self.tls_cert.read_bytes() if self.tls_cert else None,
        )

    def options(self, options: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
        extra = [("grpc.ssl_target_name_override", self.tls_server_name)] if self.tls_server_name else []
        return [*options, *extra]


PLAINTEXT = Security()


def open_channel(target: str, security: Security, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
    credentials = security.credentials()
    if credentials is None:
        return grpc.insecure_channel(target, options=security.options(options))
    return grpc.secure_channel(target, credentials, options=security.options(options))


def open_aio_channel(
    target: str, security: Security, options: Sequence[tuple[str, Any]] = ()
) -> grpc.aio.Channel:
    credentials = security.credentials()
    if credentials is None:
        return grpc.aio.insecure_channel(target, options=security.options(options))
    return grpc.aio.secure_channel(target, credentials, options=security.options(options))
