"""Service throughput and latency against raw onnxruntime, in one run.

    python -m bench.service_bench --repository models --model car-order

1. Raw onnxruntime in this process (no gRPC, no batcher) at several batch sizes: the
   ceiling. Tokenization is done once up front, so this is the model alone.
2. The service (`attnserve-serve` in a subprocess on 127.0.0.1) under a closed-loop load of
   1, 8, 32 and 64 concurrent asyncio callers sending one sentence per call, with batching
   on (default settings) and off (--max-batch-size 1), attention off (NONE) and on (ALL
   for encoders, POOLED for pooling models); and 16 texts per call at 1 and 8 callers,
   which shows what the per-call cost of Python gRPC leaves on the table.

Prints one table: sentences/s, p50 and p99 latency in ms, and throughput as a share of
the raw ceiling. The load generator shares the machine's cores with the server, as a
client on the same host would; on 2 cores that halves what the server alone could do.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from attnserve.service.bundle import read_bundle
from attnserve.service.client import AsyncClient, Client, ClientError
from attnserve.service.engine.runner import pad_ids
from attnserve.service.engine.tokenization import TextEncoder

ROOT = Path(__file__).resolve().parent.parent
MULTI = 16  # texts per call in the multi-text rows
SENTENCES = [
    "the white car is on the left and the black car is on the right.",
    "there is a black car on the left and a white car on the right near the park.",
    "on the left stands the white car, and on the right the black car.",
    "the black car waits to the left of the white car in the street.",
    "we parked the old white car on the right and the new black car on the left.",
    "a white car",
    "in the black and white picture, the white car is on the left of the black car.",
    "the car on the left is black and the car on the right is white.",
]


@dataclass
class Row:
    setup: str
    concurrency: int | str
    sentences_per_s: float
    p50_ms: float
    p99_ms: float


def raw_onnxruntime(repository: Path, model: str, seconds: float, threads: int) -> list[Row]:
    bundle = read_bundle(
        next(p for p in sorted((repository / model).iterdir(), reverse=True) if p.name.isdigit())
    )
    encoder = TextEncoder(
        bundle.tokenizer_path, bundle.manifest.max_len, reject_long=False, max_text_chars=10_000
    )
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(bundle.model_path), options, providers=["CPUExecutionProvider"])
    rows = []
    for batch in (1, 8, 32, 64, 128):
        texts = [SENTENCES[i % len(SENTENCES)] for i in range(batch)]
        encoded = encoder.encode(texts)
        ids, mask = pad_ids(encoded.ids, bundle.manifest.pad_id)
        feeds = {"input_ids": ids, "attention_mask": mask}
        session.run(["logits"], feeds)
        latencies = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            started = time.perf_counter()
            session.run(["logits"], feeds)
            latencies.append(time.perf_counter() - started)
        total = sum(latencies)
        rows.append(
            Row(
                f"onnxruntime in-process, batch {batch}",
                "-",
                batch * len(latencies) / total,
                1e3 * float(np.percentile(latencies, 50)),
                1e3 * float(np.percentile(latencies, 99)),
            )
        )
    return rows


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    def __init__(self, repository: Path, flags: list[str]) -> None:
        self.port = _free_port()
        command = [
            sys.executable,
            "-m",
            "attnserve.service.cli",
            "--repository",
            str(repository),
            "--port",
            str(self.port),
            "--no-metrics",
            "--http-port",  # off unless `flags` asks for it: port 8000 may be taken on the host
            "0",
            "--log-level",
            "warning",
            *flags,
        ]
        self.process = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "GRPC_VERBOSITY": "ERROR"})
        self.target = f"127.0.0.1:{self.port}"
        deadline = time.monotonic() + 120
        while True:
            if self.process.poll() is not None:
                raise SystemExit(f"server exited with {self.process.returncode}")
            try:
                with Client(self.target, timeout=1) as client:
                    if client.health() == "SERVING":
                        return
            except ClientError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("server did not become ready")
            time.sleep(0.2)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(30)


async def _load(
    target: str, model: str, concurrency: int, seconds: float, attention: str, per_call: int
) -> Row:
    latencies: list[float] = []
    clients = [AsyncClient(target, timeout=30) for _ in range(min(concurrency, 8))]
    stop = time.perf_counter() + seconds

    async def caller(index: int) -> None:
        client = clients[index % len(clients)]
        i = index
        while time.perf_counter() < stop:
            started = time.perf_counter()
            texts = [SENTENCES[(i + j) % len(SENTENCES)] for j in range(per_call)]
            await client.classify(texts, model=model, attention=attention)
            latencies.append(time.perf_counter() - started)
            i += 1

    for client in clients:  # connect and warm up before measuring
        await client.classify(SENTENCES[0], model=model, attention=attention)
    began = time.perf_counter()
    await asyncio.gather(*(caller(i) for i in range(concurrency)))
    elapsed = time.perf_counter() - began
    for client in clients:
        await client.close()
    return Row(
        "",
        concurrency,
        per_call * len(latencies) / elapsed,
        1e3 * float(np.percentile(latencies, 50)),
        1e3 * float(np.percentile(latencies, 99)),
    )


def service_rows(
    repository: Path, model: str, seconds: float, concurrencies: list[int], threads: int, attention_mode: str
) -> list[Row]:
    rows = []
    setups = [
        ("batching on", [], "none", 1),
        ("batching on, attention", [], attention_mode, 1),
        ("batching off", ["--max-batch-size", "1"], "none", 1),
        ("batching off, attention", ["--max-batch-size", "1"], attention_mode, 1),
        (f"batching on, {MULTI} texts per call", [], "none", MULTI),
    ]
    for name, flags, attention, per_call in setups:
        server = ServerProcess(repository, [*flags, "--intra-op-threads", str(threads)])
        try:
            for concurrency in concurrencies if per_call == 1 else [c for c in concurrencies if c <= 8]:
                row = asyncio.run(_load(server.target, model, concurrency, seconds, attention, per_call))
                row.setup = f"service, {name} ({attention}), {threads} intra-op"
                rows.append(row)
                print(f"  {row.setup} c={concurrency}: {row.sentences_per_s:.0f}/s", file=sys.stderr)
        finally:
            server.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=Path("models"))
    parser.add_argument("--model", default="car-order")
    parser.add_argument("--seconds", type=float, default=3.0, help="measuring time per point")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument(
        "--intra-op-threads",
        type=int,
        nargs="+",
        default=[1],
        help="service runs per thread count (e.g. 1 2 to choose the default)",
    )
    args = parser.parse_args(argv)
    manifest = read_bundle(
        next(p for p in sorted((args.repository / args.model).iterdir(), reverse=True) if p.name.isdigit())
    ).manifest
    attention = "all" if manifest.attention.kind in ("self", "layers") else "pooled"
    if manifest.attention.kind == "none":
        attention = "none"
    raw = raw_onnxruntime(args.repository, args.model, args.seconds, threads=1)
    best = max(raw, key=lambda row: row.sentences_per_s)
    rows = [*raw]
    for threads in args.intra_op_threads:
        rows += service_rows(args.repository, args.model, args.seconds, args.concurrency, threads, attention)
    print(f"\n{args.model} ({manifest.family}), {os.cpu_count()} cores; raw ceiling = {best.setup}\n")
    print(f"| {'setup':<58} | {'conc.':>5} | {'sent/s':>8} | {'p50 ms':>7} | {'p99 ms':>7} | {'of raw':>6} |")
    print(f"|{'-' * 60}|{'-' * 7}|{'-' * 10}|{'-' * 9}|{'-' * 9}|{'-' * 8}|")
    for row in rows:
        share = row.sentences_per_s / best.sentences_per_s
        print(
            f"| {row.setup:<58} | {row.concurrency!s:>5} | {row.sentences_per_s:>8.0f} | {row.p50_ms:>7.2f} "
            f"| {row.p99_ms:>7.2f} | {share:>6.0%} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
