"""Prometheus metrics of the service (names are a contract: see docs/architecture.md).

All families live in a `CollectorRegistry` passed in (no module globals), so tests and
several servers in one process never share counters. Hot-path code holds pre-bound
children (`ModelMetrics`, `ApiMetrics`) and never calls `.labels()` per request.

`model` label values are only names of loaded models; anything else is `UNKNOWN_MODEL`.
With `--workers N` the values live in prometheus_client's multiprocess files; gauges then
carry a multiprocess mode saying how the processes' values combine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from attnserve.service.bundle import DataProfile
from attnserve.service.common.vocabulary import Attribution
from attnserve.service.observe.drift import DriftMetrics, ModelDrift

UNKNOWN_MODEL = "_unknown"
# Every front end: a protocol (native: attnserve.v1 and the JSON API; v2: KServe V2) over a
# transport (grpc, http). The request metrics carry both labels.
ENDPOINTS = (("native", "grpc"), ("v2", "grpc"), ("native", "http"), ("v2", "http"))
Endpoint = tuple[str, str]
CASCADE_MEMBERS = ("student", "teacher")  # attnserve_cascade_texts_total's member values
GRAPHS = ("attention", "label")  # attnserve_graph_batches_total's graph values: model.onnx, label.onnx
LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
BATCH_SIZE_BUCKETS = tuple(float(2**i) for i in range(9))  # 1 .. 256
BATCH_TOKEN_BUCKETS = tuple(float(2**i) for i in range(17))  # 1 .. 65536
PADDING_BUCKETS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


class Metrics:
    """Every metric family, registered in `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        model_version = ("model", "version")
        self.request_duration = Histogram(
            "attnserve_request_duration_seconds",
            "Server time per call, receipt to reply.",
            ("protocol", "transport", "model", "version"),
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )
        self.tokenize_duration = Histogram(
            "attnserve_tokenize_duration_seconds",
            "Tokenization time per call.",
            model_version,
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )
        self.queue_wait = Histogram(
            "attnserve_queue_wait_seconds",
            "Time a call's texts waited for a batch.",
            model_version,
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )
        self.inference_duration = Histogram(
            "attnserve_inference_duration_seconds",
            "onnxruntime time per batch, post-processing included.",
            model_version,
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )
        self.batch_size = Histogram(
            "attnserve_batch_size",
            "Texts per model call.",
            model_version,
            registry=registry,
            buckets=BATCH_SIZE_BUCKETS,
        )
        self.batch_tokens = Histogram(
            "attnserve_batch_tokens",
            "Padded tokens (texts x longest) per model call.",
            model_version,
            registry=registry,
            buckets=BATCH_TOKEN_BUCKETS,
        )
        self.padding_ratio = Histogram(
            "attnserve_padding_ratio",
            "Share of padding positions per model call.",
            model_version,
            registry=registry,
            buckets=PADDING_BUCKETS,
        )
        self.requests = Counter(
            "attnserve_requests",
            "Calls by protocol, transport, model and gRPC status.",
            ("protocol", "transport", "model", "code"),
            registry=registry,
        )
        self.received = Counter(
            "attnserve_requests_received",
            "Inference calls the transport handed to the server, by protocol and transport; the ones "
            "missing from attnserve_requests_total ended (cancelled, or their deadline passed) before "
            "their handler ran.",
            ("protocol", "transport"),
            registry=registry,
        )
        self.texts = Counter(
            "attnserve_texts", "Texts by model and gRPC status.", ("model", "code"), registry=registry
        )
        self.queue_depth = Gauge(
            "attnserve_queue_depth",
            "Texts waiting for a batch.",
            ("model",),
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.inflight = Gauge(
            "attnserve_inflight_requests",
            "Calls being served.",
            ("protocol", "transport"),
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.model_info = Gauge(
            "attnserve_model_info",
            "1 for each loaded model version.",
            ("model", "version", "family", "provider"),
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.intra_op_threads = Gauge(
            "attnserve_model_intra_op_threads",
            "onnxruntime intra-op threads of each loaded model version's session (0: onnxruntime's default).",
            model_version,
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.cascade_texts = Counter(
            "attnserve_cascade_texts",
            "Texts a cascade version's members answered (member: student, or teacher when deferred).",
            ("model", "version", "member"),
            registry=registry,
        )
        self.attribution_rows = Counter(
            "attnserve_attribution_rows",
            "Forward rows attributions took (they run in the version's batches beside its texts), by method.",
            ("model", "version", "method"),
            registry=registry,
        )
        self.graph_batches = Counter(
            "attnserve_graph_batches",
            "Batches each graph of a version ran (attention: model.onnx; label: an encoder's label.onnx).",
            ("model", "version", "graph"),
            registry=registry,
        )
        self.load_failures = Counter(
            "attnserve_model_load_failures", "Model versions refused at load.", ("model",), registry=registry
        )
        self.cpu_fallback = Counter(
            "attnserve_cpu_fallback",
            "Sessions that asked for CUDA (--device auto) and run on CPU.",
            registry=registry,
        )
        self.deadline_dropped = Counter(
            "attnserve_deadline_dropped",
            "Texts dropped before inference because their deadline passed.",
            ("model",),
            registry=registry,
        )
        self.auth_failures = Counter(
            "attnserve_auth_failures",
            "Calls refused by token authentication, by gRPC status.",
            ("code",),
            registry=registry,
        )
        self.drift = DriftMetrics(registry)
        self._api = {endpoint: ApiMetrics(self, *endpoint) for endpoint in ENDPOINTS}
        self._bound: dict[tuple[str, ...], int] = {}
        self.cpu_fallback.inc(0)

    def api(self, protocol: str, transport: str) -> ApiMetrics:
        return self._api[(protocol, transport)]

    def bind_model(
        self,
        name: str,
        version: int,
        family: str,
        provider: str,
        labels: tuple[str, ...] = (),
        unk_id: int | None = None,
        reference: DataProfile | None = None,
        *,
        intra_op_threads: int = 1,
    ) -> ModelMetrics:
        """Pre-bound children for one loaded model version."""
        v = str(version)
        # Two objects can hold the same (name, version) while one replaces the other in place:
        # the series leave /metrics only when the last of them is unbound.
        for key in ((name, v), (name, v, family, provider)):
            self._bound[key] = self._bound.get(key, 0) + 1
        self.model_info.labels(name, v, family, provider).set(1)
        self.intra_op_threads.labels(name, v).set(intra_op_threads)
        self.load_failures.labels(name).inc(0)
        self.deadline_dropped.labels(name).inc(0)
        return ModelMetrics(
            name=name,
            version=v,
            family=family,
            provider=provider,
            metrics=self,
            request_duration={e: self.request_duration.labels(*e, name, v) for e in ENDPOINTS},
            tokenize=self.tokenize_duration.labels(name, v),
            queue_wait=self.queue_wait.labels(name, v),
            inference=self.inference_duration.labels(name, v),
            batch_size=self.batch_size.labels(name, v),
            batch_tokens=self.batch_tokens.labels(name, v),
            padding_ratio=self.padding_ratio.labels(name, v),
            graph_batches={graph: self.graph_batches.labels(name, v, graph) for graph in GRAPHS},
            queue_depth=self.queue_depth.labels(name),
            deadline_dropped=self.deadline_dropped.labels(name),
            drift=self.drift.bind(name, version, labels, unk_id=unk_id, reference=reference),
        )

    def load_failed(self, name: str) -> None:
        self.load_failures.labels(name).inc()

    def release(self, *key: str) -> bool:
        """Count one unbinding of a label set; True when it was bound no more."""
        left = self._bound.get(key, 0) - 1
        if left > 0:
            self._bound[key] = left
            return False
        self._bound.pop(key, None)
        return True


@dataclass(eq=False)
class ApiMetrics:
    """One front end's children; request counters are bound on first use per (model, code)."""

    metrics: Metrics
    protocol: str
    transport: str
    inflight: Gauge = field(init=False)
    received: Counter = field(init=False)
    _requests: dict[tuple[str, str], Counter] = field(default_factory=dict, init=False)
    _texts: dict[tuple[str, str], Counter] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.inflight = self.metrics.inflight.labels(self.protocol, self.transport)
        self.inflight.set(0)
        self.received = self.metrics.received.labels(self.protocol, self.transport)

    def finished(self, model: str, code: str, texts: int) -> None:
        """Count one finished call (`model` must be a loaded name or UNKNOWN_MODEL)."""
        key = (model, code)
        child = self._requests.get(key)
        if child is None:
            child = self._requests[key] = self.metrics.requests.labels(
                self.protocol, self.transport, model, code
            )
        child.inc()
        if texts:
            text_child = self._texts.get(key)
            if text_child is None:
                text_child = self._texts[key] = self.metrics.texts.labels(model, code)
            text_child.inc(texts)


@dataclass(eq=False)
class ModelMetrics:
    name: str
    version: str
    family: str
    provider: str
    metrics: Metrics
    request_duration: dict[Endpoint, Histogram]
    tokenize: Histogram
    queue_wait: Histogram
    inference: Histogram
    batch_size: Histogram
    batch_tokens: Histogram
    padding_ratio: Histogram
    graph_batches: dict[str, Counter]
    queue_depth: Gauge
    deadline_dropped: Counter
    drift: ModelDrift

    def unbind(self) -> None:
        """Drop this version's series (after the version is unloaded)."""
        m = self.metrics
        self.drift.unbind()
        if m.release(self.name, self.version, self.family, self.provider):
            m.model_info.remove(self.name, self.version, self.family, self.provider)
        if not m.release(self.name, self.version):
            return
        for endpoint in ENDPOINTS:
            m.request_duration.remove(*endpoint, self.name, self.version)
        for family in (
            m.tokenize_duration,
            m.queue_wait,
            m.inference_duration,
            m.batch_size,
            m.batch_tokens,
            m.padding_ratio,
        ):
            family.remove(self.name, self.version)
        for member in CASCADE_MEMBERS:
            m.cascade_texts.remove(self.name, self.version, member)
        for graph in GRAPHS:
            m.graph_batches.remove(self.name, self.version, graph)
        for method in (a.word for a in Attribution if a != Attribution.NONE):
            m.attribution_rows.remove(self.name, self.version, method)
        m.intra_op_threads.remove(self.name, self.version)
