"""An OTLP/gRPC trace receiver in a process of its own, for measuring the cost of exporting.

    sink = OtlpSink.start()          # python -m bench.serving.otlp_sink, on an unused port
    ... export to sink.endpoint ...
    spans = sink.stop()              # the spans it received

It decodes every export request (opentelemetry-proto's TraceService, as a collector does) and
counts the spans; running apart, its CPU is not charged to the process being measured.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from bench.harness import ROOT


class _Counting(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans = 0
        self._lock = threading.Lock()

    def Export(self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any) -> Any:
        count = sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)
        with self._lock:
            self.spans += count
        return trace_service_pb2.ExportTraceServiceResponse()


def serve() -> None:
    """Print the port, serve until stdin closes, then print the spans received."""
    counting = _Counting()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(counting, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    sys.stdin.read()
    server.stop(None)
    print(counting.spans, flush=True)


@dataclass
class OtlpSink:
    process: subprocess.Popen[str]
    port: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls) -> OtlpSink:
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.serving.otlp_sink"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.strip().isdigit():
            process.kill()
            raise RuntimeError(f"the OTLP sink did not start: {line!r}")
        return cls(process, int(line))

    def stop(self) -> int:
        """Stop the sink; the number of spans it received."""
        out, _ = self.process.communicate(timeout=30)
        return int(out.split()[-1])


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    serve()
