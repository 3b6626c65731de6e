"""Refused requests must not pin memory: thousands of large refused requests (no token,
invalid, over the in-flight byte budget) against `attnserve-serve` as its own process,
whose resident memory is read from /proc before and after each round.

300 refused 4 MB requests per round, on gRPC and HTTP, must add at most 50 MB each: the
HTTP call layer detaches the refusal from its traceback (which held the body in a cycle),
and the heap is trimmed after large requests (`service/allocator.py`).

Before refusals stopped raising through `context.abort` (which keeps each request body in
a reference cycle until the cyclic collector runs), 1,000 refused 4 MB requests took a
server from 107 MB to 1,117 MB. The bound below is generous: allocator caching and grpc's
buffers account for some growth that is not a leak.

Against the tiny BERT of 512 positions, a hostile round (attention near and over the reply
limit, the whole batch token budget with attention, unicode, deadlines, cancellations) is
run three times: each later round must leave the server within 10 MB of where the first left it.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import grpc
import pytest

from attnserve.service.allocator import INTERVAL_S, LARGE_BYTES, Trimmer
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from attnserve.service.proto.inference import grpc_service_pb2 as v2pb
from tests.service.encoder_bundles import encoder_repository
from tests.support.load import record_figures
from tests.support.methods import ALLOWED, CLASSIFY, MODEL_INFER
from tests.support.process import ServerProcess
from tests.support.servers import free_port
from tests.support.waits import eventually, until, wait_until

TOKEN = "inference-token-0123456789"
BODY_BYTES = 2_000_000
ROUND = 1000
CONCURRENCY = 8
GROWTH_BOUND_MB = 150.0  # growth allowed over all rounds (it was ~1,000 MB per round before)
MAX_INFLIGHT = 8 * 1024 * 1024


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def settled_growth(pid: int, before: float, bound: float) -> float:
    """The growth of `pid`'s resident memory over `before` MB once it is under `bound` MB,
    or at the deadline: the heap is trimmed at most once per INTERVAL_S after large
    requests, so memory freed by the last ones is given back a moment after they end."""
    grown = [rss_mb(pid) - before]

    def under() -> bool:
        grown.append(rss_mb(pid) - before)
        return grown[-1] < bound

    eventually(under, timeout=INTERVAL_S + 10, interval=0.1)
    return grown[-1]


def _blast(target: str, method: str, body: bytes, token: str | None, count: int) -> Counter[str]:
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    codes: Counter[str] = Counter()
    with grpc.insecure_channel(target) as channel:
        send = channel.unary_unary(method, request_serializer=None, response_deserializer=None)

        def one(_: int) -> str:
            try:
                send(body, timeout=60, metadata=metadata)
            except grpc.RpcError as exc:
                return str(exc.code().name)
            return "OK"

        with ThreadPoolExecutor(CONCURRENCY) as pool:
            codes.update(pool.map(one, range(count)))
    return codes


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _padded_classify() -> bytes:
    """A valid one-text request carrying BODY_BYTES in an unknown field (kept by protobuf,
    so the body stays in memory while the call waits for its batch)."""
    valid: bytes = pb.ClassifyRequest(model="car", texts=["the white car is left"]).SerializeToString()
    return valid + _varint(1000 << 3 | 2) + _varint(BODY_BYTES) + b"\x00" * BODY_BYTES


def _invalid_v2() -> bytes:
    request = v2pb.ModelInferRequest(model_name="car")
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 1])
    request.raw_input_contents.append(b"\xff" * BODY_BYTES)  # a BYTES length that overruns the data
    body: bytes = request.SerializeToString()
    return body


def test_thousands_of_large_refused_requests_leave_memory_bounded(model_repository: Path) -> None:
    # Batches wait 300 ms for more texts: calls hold their bodies long enough to overlap.
    args = ("--auth", "--max-inflight-bytes", str(MAX_INFLIGHT), "--max-delay-ms", "300")
    with ServerProcess(model_repository, *args, env={"ATTNSERVE_INFERENCE_TOKENS": TOKEN}) as server:
        target = server.target
        rounds: list[tuple[str, Callable[[], Counter[str]]]] = [
            ("unauthenticated", lambda: _blast(target, CLASSIFY, b"\x00" * BODY_BYTES, None, ROUND)),
            ("invalid (native)", lambda: _blast(target, CLASSIFY, b"\xff" * BODY_BYTES, TOKEN, ROUND // 2)),
            ("invalid (V2)", lambda: _blast(target, MODEL_INFER, _invalid_v2(), TOKEN, ROUND // 2)),
            (
                "over the in-flight limit",
                lambda: _blast(target, CLASSIFY, _padded_classify(), TOKEN, ROUND // 4),
            ),
        ]
        _blast(
            target, CLASSIFY, pb.ClassifyRequest(model="car", texts=["a car"]).SerializeToString(), TOKEN, 50
        )
        start = rss_mb(server.pid)
        figures: dict[str, object] = {"start_mb": round(start, 1)}
        seen: dict[str, Counter[str]] = {}
        for name, run in rounds:
            began = time.monotonic()
            seen[name] = run()
            figures[f"{name}: codes"] = dict(seen[name])
            figures[f"{name}: rss_mb"] = round(rss_mb(server.pid), 1)
            figures[f"{name}: seconds"] = round(time.monotonic() - began, 1)
        growth = settled_growth(server.pid, start, GROWTH_BOUND_MB)
        figures["end_mb"] = round(start + growth, 1)
        record_figures("memory after large refused requests (2 MB bodies, 8 concurrent)", **figures)
        assert server.process is not None and server.process.poll() is None
    assert seen["unauthenticated"] == {"UNAUTHENTICATED": ROUND}
    assert seen["invalid (native)"] == {"INVALID_ARGUMENT": ROUND // 2}
    assert seen["invalid (V2)"] == {"INVALID_ARGUMENT": ROUND // 2}
    over = seen["over the in-flight limit"]
    assert set(over) <= {"OK", "RESOURCE_EXHAUSTED"} and over["RESOURCE_EXHAUSTED"] > 0, over
    assert growth < GROWTH_BOUND_MB, figures


REFUSED = 300
BODY_4MB = 4_000_000  # under the 4 MiB gRPC receive limit and the 4 MiB HTTP body limit
REFUSAL_BOUND_MB = 50.0


def _http_blast(port: int, path: str, body: bytes, count: int) -> Counter[str]:
    def one(_: int) -> str:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            return str(response.status)
        except OSError as exc:  # a server may close as soon as it has answered
            return type(exc).__name__
        finally:
            connection.close()

    codes: Counter[str] = Counter()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        codes.update(pool.map(one, range(count)))
    return codes


@pytest.mark.slow
def test_hundreds_of_refused_4mb_calls_leave_memory_bounded(model_repository: Path) -> None:
    """300 refused 4 MB gRPC calls, then 300 refused 4 MB HTTP bodies: each round adds at
    most REFUSAL_BOUND_MB to the server's resident memory."""
    http_port = free_port()
    with ServerProcess(model_repository, "--http-port", str(http_port)) as server:
        target = server.target
        _blast(
            target, CLASSIFY, pb.ClassifyRequest(model="car", texts=["a car"]).SerializeToString(), None, 50
        )
        _http_blast(http_port, "/v1/models/car:classify", b'{"texts": ["a car"]}', 50)
        figures: dict[str, object] = {"start_mb": round(rss_mb(server.pid), 1)}
        rounds: list[tuple[str, Callable[[], Counter[str]]]] = [
            ("gRPC native", lambda: _blast(target, CLASSIFY, b"\xff" * BODY_4MB, None, REFUSED)),
            ("gRPC V2", lambda: _blast(target, MODEL_INFER, b"\xff" * BODY_4MB, None, REFUSED)),
            (
                "HTTP JSON API",
                lambda: _http_blast(http_port, "/v1/models/car:classify", b"[" * BODY_4MB, REFUSED),
            ),
            ("HTTP V2", lambda: _http_blast(http_port, "/v2/models/car/infer", b"{" * BODY_4MB, REFUSED)),
        ]
        growth: dict[str, float] = {}
        seen: dict[str, Counter[str]] = {}
        for name, run in rounds:
            before = rss_mb(server.pid)
            seen[name] = run()
            growth[name] = settled_growth(server.pid, before, REFUSAL_BOUND_MB)
            figures[f"{name}: codes"] = dict(seen[name])
            figures[f"{name}: rss_mb"] = round(before + growth[name], 1)
        record_figures("memory after 300 refused 4 MB requests per round (8 concurrent)", **figures)
        assert server.process is not None and server.process.poll() is None
    assert seen["gRPC native"] == {"INVALID_ARGUMENT": REFUSED}
    assert seen["gRPC V2"] == {"INVALID_ARGUMENT": REFUSED}
    assert seen["HTTP JSON API"] == {"400": REFUSED}
    assert seen["HTTP V2"] == {"400": REFUSED}
    for name, grown in growth.items():
        assert grown < REFUSAL_BOUND_MB, (name, figures)


def test_the_trimmer_trims_after_large_requests_at_most_once_per_interval() -> None:
    calls: list[int] = []

    def trim(pad: int) -> int:
        calls.append(pad)
        return 1

    async def scenario() -> None:
        trimmer = Trimmer(interval_s=0.3, trim=trim)
        trimmer.after(LARGE_BYTES - 1)  # small: nothing to give back, nothing scheduled
        assert trimmer._pending is None and calls == []
        for _ in range(50):
            trimmer.after(LARGE_BYTES)
        await until(lambda: calls == [0], what="one trim for the burst")
        trimmer.after(LARGE_BYTES)  # within the interval: scheduled for its end, not at once
        pending = trimmer._pending
        assert pending is not None and pending.when() >= trimmer._last + 0.3
        await until(lambda: len(calls) == 2, what="the second trim")
        # One trim for 50 large requests, the next one on the schedule above.
        assert calls == [0, 0] and trimmer.trims == 2

    asyncio.run(scenario())


# A later hostile round against the first. The leaks this guards against grew 500 MB a round;
# with none, a round ends anywhere in about 60 MB (the arena and the allocator's caches, by
# which batches the blast's deadlines and refusals let through): 246, 188, 207 MB and 192,
# 257, 266 MB in two runs of one tree.
ENCODER_BOUND_MB = 100.0
PHRASE = "the plot was superb and the cast was lovely "


def _encoder_calls(target: str) -> Counter[str]:
    """One hostile round over gRPC against the tiny BERT: attention=all near the 4 MiB reply
    limit and over it, texts cut at 512 tokens with a rollout, unicode it never saw, bodies
    that do not parse, deadlines that pass mid-run and calls cancelled mid-flight."""
    near = PHRASE * 50  # about 450 word pieces: every layer's maps, about 3.3 MB
    far = PHRASE * 200  # cut to 512
    bodies = [
        pb.ClassifyRequest(model="bert", texts=[near], attention=pb.ATTENTION_MODE_ALL),
        pb.ClassifyRequest(model="bert", texts=[far], attention=pb.ATTENTION_MODE_ALL),  # over the limit
        pb.ClassifyRequest(model="bert", texts=[far] * 3, attention=pb.ATTENTION_MODE_ROLLOUT),
        # the whole token budget (8 x 512) in one batch, with every layer's attention computed
        pb.ClassifyRequest(model="bert", texts=[far] * 8, top_k=3),
        pb.ClassifyRequest(model="bert", texts=["\u202efilm ﬁlm 𝔣𝔦𝔩𝔪 ١٢٣ \x00\ufeff"] * 16, top_k=3),
    ]
    raw = [body.SerializeToString() for body in bodies] + [b"\xff" * BODY_4MB]
    codes: Counter[str] = Counter()
    with grpc.insecure_channel(target) as channel:
        send = channel.unary_unary(CLASSIFY, request_serializer=None, response_deserializer=None)

        def one(index: int) -> str:
            body, timeout = raw[index % len(raw)], (0.01 if index % 7 == 0 else 60)
            try:
                send(body, timeout=timeout)
            except grpc.RpcError as exc:
                return str(exc.code().name)
            return "OK"

        with ThreadPoolExecutor(CONCURRENCY) as pool:
            codes.update(pool.map(one, range(120)))
        cancelled = [send.future(raw[2], timeout=60) for _ in range(8)]
        for future in cancelled:
            future.cancel()  # type: ignore[no-untyped-call]  # grpc-stubs leave cancel() untyped
    return codes


def _idle(server: ServerProcess) -> bool:
    """No call in flight and no text queued (cancelled calls' batches included)."""
    return server.metric("attnserve_inflight_requests") == 0 and server.metric("attnserve_queue_depth") == 0


def _encoder_http(port: int) -> Counter[str]:
    body = json.dumps({"texts": [PHRASE * 20] * 2, "attention": "all"}).encode()
    over = json.dumps({"texts": [PHRASE * 200] * 4, "attention": "all"}).encode()
    codes = _http_blast(port, "/v1/models/bert:classify", body, 16)
    codes.update(_http_blast(port, "/v1/models/bert:classify", over, 16))
    codes.update(_http_blast(port, "/v1/models/bert:classify", b"[" * BODY_4MB, 16))
    return codes


ENCODER_ROUNDS = 3


@pytest.mark.slow
def test_later_hostile_rounds_against_the_encoder_leave_memory_where_the_first_did(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The first round brings the onnxruntime arena to its peak (the largest batch the
    token budget allows, with every layer's attention) and the allocator's caches to their
    size; each later, identical round must end at most ENCODER_BOUND_MB above the first.

    It held at 500 MB more per round while the session's outputs were views of the arena
    (a reply being serialised pinned its chunk while the next batch ran, and the arena grew
    by a region twice the last) and a finished call was its own future's result (a cycle
    that kept its batches' outputs until the cyclic collector ran)."""
    http_port = free_port()
    with ServerProcess(encoder_repository(tmp_path_factory), "--http-port", str(http_port)) as server:
        rounds: list[tuple[Counter[str], float]] = []
        for _ in range(ENCODER_ROUNDS):
            codes = _encoder_calls(server.target)
            codes.update(_encoder_http(http_port))
            wait_until(partial(_idle, server), 60, 0.05, what="the round's calls to end on the server")
            # A large refused body last: the heap is trimmed after it (at most once per INTERVAL_S).
            time.sleep(INTERVAL_S)
            codes.update(_blast(server.target, CLASSIFY, b"\xff" * BODY_4MB, None, 1))
            time.sleep(2 * INTERVAL_S)
            if rounds:  # a later round: read once it is under the bound, or at the deadline
                first = rounds[0][1]
                ended = first + settled_growth(server.pid, first, ENCODER_BOUND_MB)
            else:
                ended = rss_mb(server.pid)
            rounds.append((codes, ended))
        assert server.process is not None and server.process.poll() is None
        record_figures(
            f"memory after {ENCODER_ROUNDS} hostile rounds against the tiny BERT",
            rss_mb=[round(ended, 1) for _, ended in rounds],
            codes=dict(sum((codes for codes, _ in rounds), Counter())),
        )
    first = rounds[0][1]
    for codes, ended in rounds:
        assert set(codes) <= ALLOWED | {"CANCELLED", "200", "400", "429"}, codes
        assert codes["OK"] > 0 and codes["RESOURCE_EXHAUSTED"] > 0, codes
        assert ended - first < ENCODER_BOUND_MB, [round(mb, 1) for _, mb in rounds]
