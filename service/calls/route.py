"""What a route is, declared where a transport registers it and applied by the call layer
once, the same for gRPC and HTTP: whether its calls are counted as inference, whether they
take a permit (refused while the server starts or drains), whether it asks for the bearer
token (and an admin one) where tokens are configured, and its body's size limit."""

from __future__ import annotations

from dataclasses import dataclass

from attnserve.service.settings import Settings


@dataclass(frozen=True, slots=True)
class Route:
    counted: bool  # an inference call: in the request metrics and their inflight gauge
    gated: bool = True  # takes a permit first: UNAVAILABLE while starting or draining
    token: bool = True  # needs the bearer token where tokens are configured
    admin: bool = False  # needs an admin token (the admin API)
    limit: int = 0  # the body's size limit in bytes (0: none)
    setting: str = ""  # the setting that sets `limit`, named in the refusal


@dataclass(frozen=True, slots=True)
class Routes:
    """The kinds of route a transport registers."""

    inference: Route  # classify and infer, unary and each message of a stream
    metadata: Route  # model lists, metadata, config, statistics
    health: Route  # liveness and readiness: no permit, no token
    server: Route  # the server's own metadata: no permit (answers while starting or draining)
    stream: Route  # a stream itself: a permit for its life; its messages are inference calls
    admin: Route  # the admin API: an admin token


def grpc_routes(settings: Settings) -> Routes:
    big, small = settings.max_message_bytes, settings.max_metadata_message_bytes
    return Routes(
        inference=Route(counted=True, limit=big, setting="max_message_bytes"),
        metadata=Route(counted=False, limit=small, setting="max_metadata_message_bytes"),
        # V2's ServerLive/ServerReady/ModelReady: no permit; a token, as every gRPC method but the
        # stock grpc.health.v1 service, which orchestrators probe (api/grpc/stock.py).
        health=Route(counted=False, gated=False, limit=small, setting="max_metadata_message_bytes"),
        server=Route(counted=False, gated=False, limit=small, setting="max_metadata_message_bytes"),
        stream=Route(counted=False),
        admin=Route(counted=False, admin=True, limit=small, setting="max_metadata_message_bytes"),
    )


def http_routes(settings: Settings) -> Routes:
    limit, setting = settings.http_max_body_bytes, "http_max_body_bytes"
    return Routes(
        inference=Route(counted=True, limit=limit, setting=setting),
        metadata=Route(counted=False, limit=limit, setting=setting),
        health=Route(counted=False, gated=False, token=False, limit=limit, setting=setting),
        server=Route(counted=False, gated=False, limit=limit, setting=setting),
        stream=Route(counted=False, limit=limit, setting=setting),
        admin=Route(counted=False, admin=True, limit=limit, setting=setting),
    )
