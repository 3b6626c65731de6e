"""An OTLP/gRPC trace receiver in a process of its own, for measuring the cost of exporting.

    sink = OtlpSink.start()          # python -m bench.serving.otlp_sink, on an unused port
    ... export to sink.endpoint ...
    spans = sink.stop()              # the spans it received

It is kit's receiver, which decodes every export request as a collector does; running apart,
its CPU is not charged to the process being measured.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass

from kit.launch import ROOT
from kit.otlp import OtlpReceiver


def serve() -> None:
    """Print the port, serve until stdin closes, then print the spans received."""
    with OtlpReceiver() as receiver:
        print(receiver.grpc_port, flush=True)
        sys.stdin.read()
        print(len(receiver.spans), flush=True)


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
