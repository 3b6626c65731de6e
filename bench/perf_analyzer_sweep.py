"""perf_analyzer concurrency sweep against attnserve over the V2 protocol: a table and a plot.

    .venv/bin/python -m bench.perf_analyzer_sweep --target 127.0.0.1:50051 --model car-order
    .venv/bin/python -m bench.perf_analyzer_sweep --repository models --model car-order

With --repository the script starts `attnserve-serve` on a free 127.0.0.1 port and stops it
afterwards; with --target it measures a server that is already running. NVIDIA's
perf_analyzer (tools/triton-env.sh installs it) sends TEXT requests built from --texts (one
sentence a line) or a built-in car-order set, one run per concurrency level, and reports
client-side throughput and latency percentiles plus the server-side split it reads from
ModelStatistics. Output: <out>/perf_analyzer_sweep.md and .png (throughput vs p99 latency).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from attnserve.service.proto.inference import grpc_service_pb2 as pb

ROOT = Path(__file__).resolve().parent.parent
PERF_ANALYZER = ROOT / "tools" / "perf-analyzer.sh"
LEVELS = (1, 2, 4, 8, 16, 32, 64)
SENTENCES = [
    "the white car is on the left of the black car",
    "the red car is behind the blue car",
    "a green car is parked in front of the yellow car",
    "the black car is to the right of the silver car",
    "the blue car is on the left of the red car and the white car",
    "behind the yellow car there is a green car",
    "the silver car is in front of the black car",
    "on the right of the white car is the red car",
]


@dataclass(frozen=True)
class Level:
    concurrency: int
    throughput: float  # inferences per second
    p50_ms: float
    p90_ms: float
    p99_ms: float
    queue_ms: float  # server-side averages per request
    compute_ms: float


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_ready(target: str, timeout: float) -> None:
    call = grpc.insecure_channel(target).unary_unary(
        "/inference.GRPCInferenceService/ServerReady",
        request_serializer=pb.ServerReadyRequest.SerializeToString,
        response_deserializer=pb.ServerReadyResponse.FromString,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if call(pb.ServerReadyRequest(), timeout=1).ready:
                return
        except grpc.RpcError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"attnserve at {target} did not become ready within {timeout:.0f}s")


def start_server(repository: Path, port: int) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-c", "from service.cli import serve_main; raise SystemExit(serve_main())",
        "--repository", str(repository), "--host", "127.0.0.1", "--port", str(port), "--no-metrics",
        "--log-level", "warning",
    ]  # fmt: skip
    return subprocess.Popen(command, cwd=ROOT)


def run_level(target: str, model: str, data: Path, mode: str, concurrency: int, interval_ms: int) -> Level:
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "level.csv"
        command = [
            "bash", str(PERF_ANALYZER), "-m", model, "-u", target, "-i", "grpc",
            "--input-data", str(data), f"--{mode}", "--concurrency-range", str(concurrency),
            "--measurement-interval", str(interval_ms), "--stability-percentage", "25", "--max-trials", "8",
            "-f", str(report),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise SystemExit(
                f"perf_analyzer failed at concurrency {concurrency}:\n{(done.stdout + done.stderr)[-2000:]}"
            )
        with report.open(newline="") as handle:
            (row,) = list(csv.DictReader(handle))
    return Level(
        concurrency=concurrency,
        throughput=float(row["Inferences/Second"]),
        p50_ms=float(row["p50 latency"]) / 1000,
        p90_ms=float(row["p90 latency"]) / 1000,
        p99_ms=float(row["p99 latency"]) / 1000,
        queue_ms=float(row["Server Queue"]) / 1000,
        compute_ms=(float(row["Server Compute Input"]) + float(row["Server Compute Infer"])) / 1000,
    )


def markdown(levels: list[Level], title: str) -> str:
    lines = [
        f"### {title}",
        "",
        "| concurrency | infer/s | p50 ms | p90 ms | p99 ms | server queue ms | server compute ms |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {x.concurrency} | {x.throughput:.0f} | {x.p50_ms:.2f} | {x.p90_ms:.2f} | {x.p99_ms:.2f} "
        f"| {x.queue_ms:.2f} | {x.compute_ms:.2f} |"
        for x in levels
    ]
    return "\n".join(lines) + "\n"


def plot(levels: list[Level], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    axes.plot([x.p99_ms for x in levels], [x.throughput for x in levels], marker="o")
    for level in levels:
        axes.annotate(f"c={level.concurrency}", (level.p99_ms, level.throughput), textcoords="offset points",
                      xytext=(5, -12), fontsize=8)  # fmt: skip
    axes.set_xlabel("p99 latency (ms)")
    axes.set_ylabel("throughput (inferences/s)")
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--target", help="host:port of a running attnserve")
    where.add_argument("--repository", type=Path, help="start attnserve-serve on this repository")
    parser.add_argument("--model", required=True)
    parser.add_argument("--mode", choices=("sync", "async", "streaming"), default="async")
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)), help="comma-separated concurrencies")
    parser.add_argument("--interval-ms", type=int, default=2000, help="perf_analyzer measurement window")
    parser.add_argument("--texts", type=Path, help="a file of sentences, one a line")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)

    texts = args.texts.read_text().splitlines() if args.texts else SENTENCES
    levels = [int(level) for level in args.levels.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.out / "perf_analyzer_texts.json"
    data.write_text(json.dumps({"data": [{"TEXT": [text]} for text in texts if text.strip()]}))

    server = None
    target = args.target
    if args.repository is not None:
        target = f"127.0.0.1:{free_port()}"
        server = start_server(args.repository, int(target.rsplit(":", 1)[1]))
    try:
        wait_ready(target, timeout=180)
        results = []
        for concurrency in levels:
            level = run_level(target, args.model, data, args.mode, concurrency, args.interval_ms)
            results.append(level)
            print(f"concurrency {concurrency}: {level.throughput:.0f} infer/s, p99 {level.p99_ms:.2f} ms")
    finally:
        if server is not None:
            server.terminate()
            server.wait(60)

    title = f"attnserve V2 ({args.model}), perf_analyzer --{args.mode}, {os.cpu_count()} CPU cores"
    table = markdown(results, title)
    (args.out / "perf_analyzer_sweep.md").write_text(table)
    plot(results, title, args.out / "perf_analyzer_sweep.png")
    print(table)
    print(f"wrote {args.out / 'perf_analyzer_sweep.md'} and {args.out / 'perf_analyzer_sweep.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
