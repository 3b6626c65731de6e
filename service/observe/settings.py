"""Settings of traces, logs and the access line. `Settings` inherits them like the rest.

Tracing is off by default: with it off no exporter, provider or thread exists and a call
pays a few `is None` tests. Where a value is left unset, the standard OpenTelemetry variables
decide (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`, `OTEL_TRACES_SAMPLER_ARG`, `OTEL_SERVICE_NAME`), so
a deployment that already sets them for its other services needs only `--tracing`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

OtlpProtocol = Literal["grpc", "http/protobuf"]
LogFormat = Literal["text", "json"]


class ObserveSettings(BaseSettings):
    # The same reading rules as `Settings`, so the class also works alone (tests, tools).
    model_config = SettingsConfigDict(env_prefix="ATTNSERVE_", extra="forbid", frozen=True)

    # --- traces (docs/observability.md) ----------------------------------------------
    tracing: bool = Field(
        False, description="Export OpenTelemetry traces over OTLP: a span per call, per stage and per batch."
    )
    trace_sample_ratio: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Share of calls traced when the caller sent no sampled traceparent (default: "
        "OTEL_TRACES_SAMPLER_ARG, else 1).",
    )
    otlp_endpoint: str | None = Field(
        None,
        description="OTLP collector address, e.g. http://collector:4317 for grpc or "
        "http://collector:4318/v1/traces for http/protobuf (default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, "
        "OTEL_EXPORTER_OTLP_ENDPOINT, else the exporter's localhost default).",
    )
    otlp_protocol: OtlpProtocol | None = Field(
        None,
        description="OTLP transport: grpc or http/protobuf (default: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, "
        "OTEL_EXPORTER_OTLP_PROTOCOL, else grpc).",
    )

    # --- logs ----------------------------------------------------------------------------
    log_format: LogFormat = Field(
        "text",
        description="text: one readable line per record; json: one JSON object per line with time, level, "
        "logger, request id, trace and span id.",
    )
    access_log_sample: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Share of calls that get an access line (transport, method, model, version, texts, "
        "status, latency, queue wait); 0 = none, 1 = every call.",
    )
