"""Service settings: defaults < `ATTNSERVE_*` environment variables < command-line flags.

Every field below is one setting; its description is the documentation (`attnserve-serve
--help` prints it, docs/service.md lists it). A flag is the field name with dashes
(`max_batch_size` -> `--max-batch-size`), an environment variable the upper-case name with
the `ATTNSERVE_` prefix (`ATTNSERVE_MAX_BATCH_SIZE`).
"""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from attnserve.service.observe.settings import ObserveSettings
from attnserve.service.settings_reliability import ReliabilitySettings

Device = Literal["cpu", "cuda", "auto"]
GraphOptimization = Literal["disable", "basic", "extended", "all"]
LongText = Literal["truncate", "reject", "windows"]
VersionPolicy = Literal["latest", "all"]
LogLevel = Literal["debug", "info", "warning", "error"]
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")

MODEL_THREADS_FORM = "NAME=N (a model name, then its intra-op threads: 0 or more)"


class Settings(ReliabilitySettings, ObserveSettings):
    model_config = SettingsConfigDict(env_prefix="ATTNSERVE_", extra="forbid", frozen=True)

    # --- model repository -------------------------------------------------------------
    repository: Path = Field(Path("models"), description="Model repository: <repository>/<name>/<version>/.")
    version_policy: VersionPolicy = Field(
        "latest", description="Load only each model's latest good version, or every version."
    )
    default_model: str = Field(
        "",
        description="Model of the calls that name none, in every API (empty: the repository's only model; "
        "with several, such a call is refused with the list of models).",
    )

    # --- network ----------------------------------------------------------------------
    host: str = Field("127.0.0.1", description="Address the gRPC server binds; use 0.0.0.0 in containers.")
    port: int = Field(50051, ge=0, le=65535, description="gRPC port (0 picks a free port).")
    metrics_host: str | None = Field(None, description="Address of the /metrics server (default: --host).")
    metrics_port: int = Field(
        9100, ge=0, le=65535, description="Prometheus /metrics port (0 picks a free port)."
    )
    metrics: bool = Field(True, description="Serve Prometheus metrics over HTTP.")
    reflection: bool = Field(True, description="Enable gRPC server reflection (grpcurl and friends).")
    max_message_bytes: int = Field(
        4 * 1024 * 1024,
        ge=1024,
        description="Largest request message accepted, in bytes (after decompression).",
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="Server processes sharing the port (SO_REUSEPORT); each has its own models.",
    )

    # --- connections: keepalive (docs/reliability.md) ---------------------------------
    keepalive_time_s: float = Field(
        60.0, gt=0, description="Ping a connection after this many idle seconds to find dead peers."
    )
    keepalive_timeout_s: float = Field(
        20.0, gt=0, description="Close a connection whose keepalive ping is unanswered this long."
    )
    keepalive_permit_without_calls: bool = Field(
        True, description="Allow keepalive pings on connections with no call in progress (both ways)."
    )
    min_client_ping_interval_s: float = Field(
        10.0,
        ge=0,
        description="Shortest interval between client pings without data; a faster ping is a strike.",
    )
    max_ping_strikes: int = Field(
        2, ge=0, description="Strikes before an over-pinging connection is closed (0 = never close)."
    )

    # --- access control (docs/reliability.md) -----------------------------------------
    tls_cert: Path | None = Field(None, description="PEM certificate chain: serve gRPC (and HTTP) over TLS.")
    tls_key: Path | None = Field(None, description="PEM private key of --tls-cert.")
    tls_client_ca: Path | None = Field(
        None, description="PEM CA bundle: require client certificates signed by it (mutual TLS)."
    )
    auth: bool = Field(
        False,
        description="Require a bearer token on every call but health checks (tokens: --auth-tokens-file, "
        "ATTNSERVE_INFERENCE_TOKENS, ATTNSERVE_ADMIN_TOKENS).",
    )
    auth_tokens_file: Path | None = Field(
        None, description="File of tokens, one '<role> <token>' per line; role is inference or admin."
    )
    admin: bool = Field(
        False, description="Serve the admin API (attnserve.v1.Admin: reload and unload models by name)."
    )
    # On by default so that export-then-classify works on a running server; a poll stats
    # the files of each version folder, cheap next to a single classify call.
    repository_poll_seconds: float = Field(
        2.0,
        ge=0,
        description="Re-read the repository this often and swap in new or changed versions (0 = never).",
    )

    # --- HTTP port: KServe V2 REST, the JSON API, the explorer (docs/http.md) ----------
    http_port: int = Field(
        8000, ge=0, le=65535, description="HTTP port (V2 REST, JSON API, explorer at /); 0 turns it off."
    )
    http_max_body_bytes: int = Field(
        4 * 1024 * 1024, ge=1024, description="Largest HTTP request body accepted, in bytes (413 beyond it)."
    )
    http_read_timeout_s: float = Field(
        10.0, gt=0, description="Longest time to receive a request body; a slower client gets 408."
    )
    http_keepalive_s: float = Field(
        5.0, gt=0, description="Close an idle HTTP keep-alive connection after this many seconds."
    )

    # --- onnxruntime ------------------------------------------------------------------
    device: Device = Field(
        "cpu",
        description="cpu; cuda (fail at start without CUDAExecutionProvider); "
        "auto (CUDA when available, else CPU with a warning and attnserve_cpu_fallback_total).",
    )
    cuda_device_id: int = Field(0, ge=0, description="GPU index for --device cuda/auto.")
    # None: each version's threads are measured at load (engine/models/threads.py): one for a
    # small model, whose front end needs the other cores, all of this worker's for an encoder.
    intra_op_threads: int | None = Field(
        None,
        ge=0,
        description="onnxruntime intra-op threads of every model's session (none = the bundle's hint, else "
        "measured at load; 0 = onnxruntime's default: one per core).",
    )
    model_threads: Annotated[dict[str, Annotated[int, Field(ge=0)]], NoDecode] = Field(
        default_factory=dict,
        description="One model's intra-op threads, over --intra-op-threads: NAME=N, repeatable "
        "(environment: NAME=N,NAME=N); a cascade's NAME sets both members, NAME.student or "
        "NAME.teacher one.",
    )
    graph_optimization: GraphOptimization = Field("all", description="onnxruntime graph optimisation level.")
    cpu_arena: bool = Field(
        True, description="Use onnxruntime's CPU memory arena (faster, holds peak memory)."
    )
    allow_spinning: bool | None = Field(
        None,
        description="Let idle intra-op threads spin while a run lasts (lower latency, takes CPU the "
        "event loop needs; they stop as the run returns); "
        "unset: on for a model whose measured choice gives it every core, when it is the only "
        "model version the server holds.",
    )

    # --- batching and limits ----------------------------------------------------------
    max_batch_size: int = Field(32, ge=1, le=4096, description="Most texts in one model call.")
    max_batch_tokens: int = Field(
        4096,
        ge=1,
        description="Most padded tokens (texts x longest text) in one model call; one text always fits.",
    )
    # No fixed wait by default: at one caller a wait only adds latency (and a lone call runs on
    # the event loop, with no thread hand-off); while calls overlap the batcher holds a batch for
    # at most one batch's run time (2 ms cap; docs/results/cost.md). A fixed wait turns both off.
    max_delay_ms: float = Field(
        0.0,
        ge=0,
        le=10_000,
        description="Longest time a queued text waits for its batch to fill; 0 = run as soon as the model is "
        "free, except that while calls overlap a batch may wait up to one batch's run time (at most 2 ms).",
    )
    max_concurrent_batches: int = Field(
        1, ge=1, le=64, description="Batches of one model version running at once (threads per model)."
    )
    max_queue: int = Field(
        1024, ge=1, description="Texts waiting per model version; beyond it calls get RESOURCE_EXHAUSTED."
    )
    max_texts_per_request: int = Field(64, ge=1, description="Most texts in one request.")
    max_attribution_rows: int = Field(
        512,
        ge=1,
        description="Most forward rows one request's attributions may take, all its texts together "
        "(occlusion: a text's words + 1; shapley: its attribution_budget); more is INVALID_ARGUMENT. "
        "Left unset it is max_queue when that is smaller.",
    )
    max_text_chars: int = Field(10_000, ge=1, description="Most characters in one text.")
    long_text: LongText = Field(
        "truncate",
        description="Texts longer than the model's max_len tokens: truncate (flagged per text), reject, or "
        "windows (read whole as overlapping windows, by the bundle's long-text policy or windows of max_len; "
        "a request may ask for any of the three).",
    )
    stream_window: int = Field(
        64,
        ge=1,
        description="Requests of one ClassifyStream processed concurrently (keeps replies in order).",
    )

    # --- lifecycle and logs -----------------------------------------------------------
    grace_seconds: float = Field(
        10.0,
        ge=0,
        description="On SIGTERM/SIGINT: time for accepted calls to finish before the server stops.",
    )
    log_level: LogLevel = Field("info", description="Log level.")

    @property
    def attribution_rows(self) -> int:
        """The cap in force: max_attribution_rows, within max_queue (a request's rows queue together)."""
        return min(self.max_attribution_rows, self.max_queue)

    @field_validator("model_threads", mode="before")
    @classmethod
    def _model_threads(cls, value: object) -> object:
        if isinstance(value, str):  # the environment's NAME=N,NAME=N
            value = [model_thread(item) for item in value.split(",") if item.strip()]
        if isinstance(value, list | tuple):  # the flag's (name, threads) pairs
            pairs = [model_thread(item) if isinstance(item, str) else item for item in value]
            return dict(pairs)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.max_texts_per_request > self.max_queue:
            raise ValueError(
                f"max_texts_per_request ({self.max_texts_per_request}) "
                f"cannot exceed max_queue ({self.max_queue})"
            )
        if self.max_attribution_rows > self.max_queue and "max_attribution_rows" in self.model_fields_set:
            raise ValueError(
                f"max_attribution_rows ({self.max_attribution_rows}) cannot exceed max_queue "
                f"({self.max_queue}): a request's attribution rows queue together"
            )
        if self.workers > 1 and self.port == 0:
            raise ValueError("workers > 1 needs a fixed port: the processes share it with SO_REUSEPORT")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both to serve over TLS")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("tls_client_ca (mutual TLS) needs tls_cert and tls_key")
        if self.http_port and self.http_port == self.port:
            raise ValueError("http_port and port must differ (or set http_port 0 to turn HTTP off)")
        if self.max_inflight_bytes and self.max_inflight_bytes < self.max_message_bytes:
            raise ValueError("max_inflight_bytes cannot be below max_message_bytes (one request must fit)")
        if self.admin and self.workers > 1:
            raise ValueError(
                "admin needs workers = 1 (a call reaches one worker); use repository_poll_seconds instead"
            )
        if self.admin and not self.auth and self.host not in LOOPBACK:
            raise ValueError("admin on a non-loopback host needs auth: turn on auth with admin tokens")
        return self

    @property
    def metrics_bind_host(self) -> str:
        return self.metrics_host if self.metrics_host is not None else self.host


def model_thread(text: str) -> tuple[str, int]:
    """One `NAME=N` of --model-threads (ValueError, naming the expected form, otherwise)."""
    name, equals, count = text.strip().partition("=")
    if not (equals and name.strip() and count.strip().isascii() and count.strip().isdigit()):
        raise ValueError(f"{text!r} is not {MODEL_THREADS_FORM}")
    return name.strip(), int(count)


def _model_thread_flag(text: str) -> tuple[str, int]:
    try:
        return model_thread(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _shown(default: object) -> str:
    return "none" if default is None else ('""' if default == "" else str(default))


def _argument_type(annotation: Any) -> tuple[Any, list[str] | None]:
    """(callable converting the flag's string, choices) for a field annotation."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        annotation = members[0]
    if typing.get_origin(annotation) is Literal:
        return str, [str(value) for value in typing.get_args(annotation)]
    return annotation, None


def build_parser(prog: str = "attnserve-serve") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Serve the models of a repository over gRPC (attnserve.v1 API, V2, health, reflection) "
        "and HTTP (V2 REST, JSON API, attention explorer) "
        "with Prometheus metrics. Every flag also reads ATTNSERVE_<NAME> from the environment.",
        argument_default=argparse.SUPPRESS,  # only flags actually given override env/defaults
    )
    for name, field in Settings.model_fields.items():
        help_text = field.description or ""
        if field.annotation is bool or field.annotation == bool | None:
            shown = f"{help_text} (default: {'on' if field.default else 'off'})"
            parser.add_argument(_flag(name), dest=name, action=argparse.BooleanOptionalAction, help=shown)
            continue
        if name == "model_threads":
            parser.add_argument(
                _flag(name),
                dest=name,
                action="append",
                type=_model_thread_flag,
                metavar="NAME=N",
                help=f"{help_text} (default: none)",
            )
            continue
        convert, choices = _argument_type(field.annotation)
        parser.add_argument(
            _flag(name),
            dest=name,
            type=convert,
            choices=choices,
            help=help_text if "(default:" in help_text else f"{help_text} (default: {_shown(field.default)})",
        )
    parser.add_argument(
        "--truncate",
        dest="long_text",
        action="store_const",
        const="truncate",
        help="Same as --long-text truncate.",
    )
    parser.add_argument(
        "--reject-long",
        dest="long_text",
        action="store_const",
        const="reject",
        help="Same as --long-text reject.",
    )
    return parser


def load_settings(argv: Sequence[str] | None = None) -> Settings:
    """Settings from the environment with `argv` flags on top (argparse exits on bad flags)."""
    parser = build_parser()
    overrides = vars(parser.parse_args(argv))
    return Settings(**overrides)
