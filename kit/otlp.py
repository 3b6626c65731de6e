"""A real OTLP trace receiver: the collector's gRPC TraceService and HTTP /v1/traces, for tests
that check the spans and for benchmarks that measure the cost of exporting them.

    with OtlpReceiver() as receiver:           # both transports on unused 127.0.0.1 ports
        ... export to receiver.grpc_endpoint or receiver.http_endpoint ...
        spans = receiver.wait_for(lambda spans: len(spans) >= 3)

Requests are decoded with opentelemetry-proto's messages, exactly as a collector decodes
them; every span is kept flattened (hex ids, plain attribute values) for assertions.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanProto
from opentelemetry.proto.trace.v1.trace_pb2 import Status as StatusProto

ExportRequest = trace_service_pb2.ExportTraceServiceRequest


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs if isinstance(kv, KeyValue)}


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root span
    kind: str  # SPAN_KIND_SERVER, SPAN_KIND_INTERNAL, ...
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    links: list[tuple[str, str]]  # (trace id, span id)
    status: str  # STATUS_CODE_UNSET, STATUS_CODE_OK, STATUS_CODE_ERROR
    status_message: str
    resource: dict[str, Any]
    transport: str  # which endpoint received it: grpc or http

    @classmethod
    def decode(cls, span: SpanProto, resource: dict[str, Any], transport: str) -> ReceivedSpan:
        return cls(
            name=span.name,
            trace_id=span.trace_id.hex(),
            span_id=span.span_id.hex(),
            parent_span_id=span.parent_span_id.hex(),
            kind=SpanProto.SpanKind.Name(span.kind),
            start_ns=span.start_time_unix_nano,
            end_ns=span.end_time_unix_nano,
            attributes=_attributes(span.attributes),
            links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
            status=StatusProto.StatusCode.Name(span.status.code),
            status_message=span.status.message,
            resource=resource,
            transport=transport,
        )


@dataclass
class _Store:
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)

    def add(self, request: ExportRequest, transport: str) -> None:
        decoded = [
            ReceivedSpan.decode(span, _attributes(rs.resource.attributes), transport)
            for rs in request.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]
        with self.changed:
            self.spans.extend(decoded)
            self.requests += 1
            self.changed.notify_all()


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, store: _Store) -> None:
        self.store = store

    def Export(self, request: ExportRequest, context: grpc.ServicerContext) -> Any:
        self.store.add(request, "grpc")
        return trace_service_pb2.ExportTraceServiceResponse()


def _http_handler(store: _Store) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                self.send_error(404 if self.path != "/v1/traces" else 415)
                return
            store.add(ExportRequest.FromString(body), "http")
            reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class OtlpReceiver:
    """OTLP/gRPC and OTLP/HTTP (protobuf) trace endpoints on 127.0.0.1, sharing one store."""

    def __init__(self) -> None:
        self._store = _Store()
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _TraceService(self._store), self._grpc
        )
        self.grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _http_handler(self._store))
        self.http_port = self._http.server_address[1]
        self._http_thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/v1/traces"

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._store.changed:
            return list(self._store.spans)

    @property
    def requests(self) -> int:
        return self._store.requests

    def wait_for(
        self, ready: Callable[[list[ReceivedSpan]], bool], timeout_s: float = 10.0
    ) -> list[ReceivedSpan]:
        """The spans received once `ready(spans)` holds; AssertionError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._store.changed:
            while not ready(self._store.spans):
                left = deadline - time.monotonic()
                if left <= 0:
                    names = [s.name for s in self._store.spans]
                    raise AssertionError(
                        f"the receiver did not get the expected spans in {timeout_s}s: {names}"
                    )
                self._store.changed.wait(left)
            return list(self._store.spans)

    def start(self) -> OtlpReceiver:
        self._grpc.start()
        self._http_thread.start()
        return self

    def stop(self) -> None:
        self._grpc.stop(None)
        self._http.shutdown()
        self._http.server_close()

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
