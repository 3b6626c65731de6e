"""Settings that bound what a caller, a connection or a dying worker can cost the server
(docs/reliability.md). `Settings` inherits them; they read `ATTNSERVE_*` like the rest.

Defaults are safe for a server on an untrusted network: a silent connection is closed,
a client cannot open unbounded streams on one connection, request bodies in progress have
a byte budget, and replies never exceed what a gRPC client accepts by default.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

MIB = 1024 * 1024
# What grpc clients accept by default (grpc.max_receive_message_length): a larger reply
# fails at the client after the server did all the work.
CLIENT_DEFAULT_RECEIVE_BYTES = 4 * MIB


class ReliabilitySettings(BaseSettings):
    # --- memory bounds ----------------------------------------------------------------
    max_inflight_bytes: int = Field(
        256 * MIB,
        ge=0,
        description="Request bytes in progress at once (bodies being decoded plus the texts they queued); "
        "beyond it calls get RESOURCE_EXHAUSTED (0 = no limit).",
    )
    max_metadata_message_bytes: int = Field(
        64 * 1024,
        ge=1024,
        description="Largest request accepted by metadata, model-info and admin methods, in bytes.",
    )
    max_reply_bytes: int = Field(
        CLIENT_DEFAULT_RECEIVE_BYTES,
        ge=1024,
        description="Largest reply the server will build; a request whose reply would be larger (attention "
        "of many long texts) gets RESOURCE_EXHAUSTED up front.",
    )

    # --- connections ------------------------------------------------------------------
    handshake_timeout_s: float = Field(
        10.0, gt=0, description="Close a connection that has not completed its handshake in this time."
    )
    max_connection_idle_s: float = Field(
        300.0,
        ge=0,
        description="Close (GOAWAY) a connection with no call in progress for this long (0 = never).",
    )
    max_connection_age_s: float = Field(
        0.0,
        ge=0,
        description="Close (GOAWAY) any connection this old so clients rebalance (0 = never; off by "
        "default because it ends streams older than age + grace).",
    )
    max_connection_age_grace_s: float = Field(
        30.0, ge=0, description="After max_connection_age_s: time for the connection's calls to finish."
    )
    max_concurrent_streams: int = Field(
        1000,
        ge=1,
        description="Calls in progress at once on one connection (HTTP/2 streams); a client opening more "
        "at once gets UNAVAILABLE (stream refused) for the excess.",
    )

    # --- draining ----------------------------------------------------------------------
    drain_accept_s: float = Field(
        0.5,
        ge=0,
        description="On SIGTERM: keep admitting calls this long (calls sent before the signal may still "
        "be queued inside grpc), then refuse new ones with UNAVAILABLE.",
    )

    # --- workers (--workers N) --------------------------------------------------------
    worker_max_restarts: int = Field(
        5,
        ge=0,
        description="Restarts of dead workers allowed within worker_restart_window_s; one more and the "
        "supervisor stops every worker and exits 1 (a crash loop).",
    )
    worker_restart_window_s: float = Field(
        60.0, gt=0, description="Window over which worker restarts are counted."
    )
