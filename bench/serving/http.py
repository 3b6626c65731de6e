"""The HTTP port next to gRPC, on one server in one run: the same texts through each path.

Native gRPC, the JSON API and KServe V2 REST (binary outputs) take turns for `--rounds` rounds,
closed loop, attention off; the HTTP client is a minimal keep-alive HTTP/1.1 client on asyncio
streams, so its cost stays near the gRPC client's.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence

from attnserve.service.client import AsyncClient
from bench import sections
from bench.render import log_point, markdown_table
from kit.launch import attnserve, run_async
from kit.load import Measurement, callers
from kit.ports import free_port
from kit.results import Point

PATHS = ("grpc native", "http json", "http v2 rest")
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
JSON = {"Content-Type": "application/json"}


class HttpConnection:
    """One keep-alive HTTP/1.1 connection: POST a body, read the reply (Content-Length framed)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> bytes:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self._reader is not None
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
        self._writer.write(head.encode() + body)
        status = await self._reader.readline()
        length = 0
        while (line := await self._reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
        data = await self._reader.readexactly(length)
        if b" 200 " not in status:
            raise RuntimeError(f"{status.decode().strip()}: {data[:200]!r}")
        return data

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def _caller(
    target: str, http_port: int, model: str, path: str, concurrency: int
) -> tuple[Callable[[int, list[str]], Awaitable[object]], Sequence[AsyncClient | HttpConnection]]:
    """The call of caller `index` with its texts, and the clients to close after."""
    if path == "grpc native":
        clients = [AsyncClient(target, timeout=30) for _ in range(min(concurrency, 8))]
        return lambda index, texts: clients[index % len(clients)].classify(texts, model=model), clients
    connections = [HttpConnection(http_port) for _ in range(concurrency)]
    url = f"/v1/models/{model}:classify" if path == "http json" else f"/v2/models/{model}/infer"
    outputs = [{"name": name, "parameters": {"binary_data": True}} for name in ("LABEL", "PROBABILITIES")]

    def body(texts: list[str]) -> bytes:
        if path == "http json":
            return json.dumps({"texts": texts}).encode()
        tensor = {"name": "TEXT", "datatype": "BYTES", "shape": [len(texts), 1], "data": texts}
        return json.dumps({"inputs": [tensor], "outputs": outputs}).encode()

    return lambda index, texts: connections[index].post(url, body(texts), JSON), connections


async def measure(
    target: str, http_port: int, model: str, path: str, concurrency: int, per_call: int, seconds: float,
    into: Measurement,
) -> None:  # fmt: skip
    """One round of `path` into `into`: its calls in the ledger, its seconds added."""
    call, clients = _caller(target, http_port, model, path, concurrency)
    for index in range(concurrency):  # connect and warm up before measuring
        await call(index, SENTENCES[:per_call])
    stop, sent = time.perf_counter() + seconds, [0] * concurrency

    async def step(index: int) -> None:
        texts = [SENTENCES[(index + sent[index] + j) % len(SENTENCES)] for j in range(per_call)]
        sent[index] += 1
        await into.ledger.call(lambda: call(index, texts))

    began = time.perf_counter()
    await callers(concurrency, step, lambda: time.perf_counter() < stop)
    into.seconds += time.perf_counter() - began
    for client in clients:
        await client.close()


def table(points: list[Point]) -> str:
    grpc = {(p.texts, p.concurrency): p.texts_per_s for p in points if p.system == "grpc native"}
    rows = [[p.system, str(p.texts), str(p.concurrency), f"{p.texts_per_s:.0f}", f"{p.p50_ms:.2f}",
             f"{p.p99_ms:.2f}", f"{p.texts_per_s / grpc[(p.texts, p.concurrency)]:.2f}"]
            for p in points]  # fmt: skip
    header = ["path", "texts per call", "callers", "texts/s", "p50 ms", "p99 ms", "throughput vs gRPC"]
    return "\n".join(markdown_table(header, rows))


def main(argv: list[str] | None = None) -> int:
    parser = sections.parser("http", __doc__, served=True)
    parser.add_argument("--seconds", type=float, default=3.0, help="measurement per round")
    parser.add_argument("--rounds", type=int, default=3, help="turns each path takes")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8], help="callers")
    parser.add_argument("--per-call", type=int, nargs="+", default=[1, 32], help="texts per call")
    args = parser.parse_args(argv)
    http_port, points = free_port(), []
    with attnserve(args.repository, ["--http-port", str(http_port)]) as server:
        for per_call in args.per_call:
            for concurrency in args.concurrency:
                # a path's rounds in one measurement: calls over the summed time, percentiles over all
                turns = {path: Measurement(0.0, per_call) for path in PATHS}
                for _ in range(args.rounds):
                    for path in PATHS:
                        run_async(measure(server.target, http_port, args.model, path, concurrency, per_call,
                                          args.seconds, turns[path]))  # fmt: skip
                for path in PATHS:
                    point = Point.of(turns[path], system=path, concurrency=concurrency)
                    points.append(log_point(point, "texts", "concurrency"))
    print(table(points))
    return 0
