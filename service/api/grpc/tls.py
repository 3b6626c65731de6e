"""TLS and mutual TLS for the gRPC port.

`--tls-cert` + `--tls-key` serve TLS; `--tls-client-ca` also requires every client to
present a certificate signed by that CA (mutual TLS). The files are checked with Python's
`ssl` at start-up, so a wrong path, a key that does not match the certificate or a file
that is not PEM stops the server with a clear message instead of failing every handshake.

Rotation: before each new connection's handshake grpc asks `_Rotation` for the current
files; when their modification times change they are read and checked again and used from
then on (connections already open keep theirs). A bad replacement is logged and the
previous certificate stays in use, so cert-manager style rotation needs no restart.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import cast

import grpc

from attnserve.service.errors import StartupError
from attnserve.service.settings import Settings

log = logging.getLogger(__name__)


def _read(path: Path, flag: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise StartupError(f"{flag}: cannot read {path}: {exc.strerror or exc}") from None


def _check(cert: Path, key: Path, ca: Path | None) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise StartupError(
            f"--tls-cert/--tls-key: {cert} and {key} are not a PEM certificate chain and its key: {exc}"
        ) from None
    if ca is not None:
        try:
            context.load_verify_locations(cafile=ca)
        except (ssl.SSLError, OSError) as exc:
            raise StartupError(f"--tls-client-ca: {ca} is not a PEM CA bundle: {exc}") from None


def _configuration(cert: Path, key: Path, ca: Path | None) -> grpc.ServerCertificateConfiguration:
    _check(cert, key, ca)
    return grpc.ssl_server_certificate_configuration(
        [(_read(key, "--tls-key"), _read(cert, "--tls-cert"))],
        root_certificates=_read(ca, "--tls-client-ca") if ca is not None else None,
    )


class _Rotation:
    """Hands grpc a new certificate configuration when the files change."""

    def __init__(self, cert: Path, key: Path, ca: Path | None) -> None:
        self._files = (cert, key, ca)
        self._lock = threading.Lock()  # grpc may ask from several of its threads
        self._stamp = self._stamps()

    def _stamps(self) -> tuple[int, ...]:
        stamps = []
        for path in self._files:
            try:
                stamps.append(os.stat(path).st_mtime_ns if path is not None else 0)
            except OSError:
                stamps.append(-1)
        return tuple(stamps)

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        with self._lock:
            stamp = self._stamps()
            if stamp == self._stamp:
                return None
            self._stamp = stamp
            cert, key, ca = self._files
            assert cert is not None and key is not None
            try:
                configuration = _configuration(cert, key, ca)
            except StartupError as exc:
                log.error("TLS files changed but cannot be used; keeping the previous ones: %s", exc)
                return None
            log.info("TLS certificate reloaded from %s", cert)
            return configuration


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """Credentials for the gRPC port (None: plaintext); StartupError when the files are unusable."""
    cert, key, ca = settings.tls_cert, settings.tls_key, settings.tls_client_ca
    if cert is None or key is None:
        return None
    # grpc's stubs omit it, but the fetcher may return None: "keep the current files".
    fetch = cast("Callable[[], grpc.ServerCertificateConfiguration]", _Rotation(cert, key, ca))
    return grpc.dynamic_ssl_server_credentials(
        _configuration(cert, key, ca),
        fetch,
        require_client_authentication=ca is not None,
    )
