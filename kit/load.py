"""The load generator: asyncio callers, closed loop or open loop, every call in a `Ledger`.

`callers` is the closed loop for any call (a client's method, an HTTP post, a raw gRPC
call): `concurrency` callers, each sending its next call when the previous one ended.
`closed_loop` and `open_loop` drive gRPC with prepared request bytes, and keep replies as
bytes, so the client spends its CPU on gRPC alone: on a 2-core machine the client shares
the cores with the server, as a client on the same host would. Open loop: a fixed arrival
rate whatever the latency, with a cap on calls in flight (arrivals over it are counted as
`not_sent`). Only calls that complete inside the measuring window count; a warm-up precedes it.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from kit.launch import run_async
from kit.ledger import Ledger, percentile

Check = Callable[[bytes], "str | None"]


async def callers(
    concurrency: int, step: Callable[[int], Awaitable[object]], go_on: Callable[[], bool]
) -> None:
    """`concurrency` callers (numbered from 0), each awaiting `step(number)` while `go_on()`."""

    async def caller(index: int) -> None:
        while go_on():
            await step(index)

    await asyncio.gather(*(caller(index) for index in range(concurrency)))


async def keep_calling(
    ledger: Ledger, make: Callable[[], Awaitable[Any]], *, workers: int, stop: asyncio.Event
) -> None:
    """`workers` callers making `make()` back to back, each call in `ledger`, until `stop` is set."""
    await callers(workers, lambda _: ledger.call(make), lambda: not stop.is_set())


@dataclass(frozen=True)
class Requests:
    """What one measurement sends: a method, prepared bodies (cycled) and texts per body."""

    method: str
    bodies: Sequence[bytes]
    texts_per_request: int
    check: Check | None = None  # validates the first OK reply: a broken setup fails loudly


@dataclass
class Measurement:
    """The calls that ended inside the measuring window, in a ledger timing each."""

    seconds: float
    texts_per_request: int = 1
    ledger: Ledger = field(default_factory=Ledger)
    not_sent: int = 0
    completed: int = 0  # every call that ended, warm-up included (for CPU per call)

    @property
    def ok(self) -> int:
        return self.ledger.ended["OK"]

    @property
    def errors(self) -> Counter[str]:
        return Counter({code: n for code, n in self.ledger.ended.items() if code != "OK"})

    @property
    def calls(self) -> int:
        return sum(self.ledger.ended.values())

    @property
    def rps(self) -> float:
        return self.ok / self.seconds

    @property
    def texts_per_s(self) -> float:
        return self.ok * self.texts_per_request / self.seconds

    @property
    def error_share(self) -> float:
        return (self.calls - self.ok) / self.calls if self.calls else 0.0

    def percentile(self, q: float) -> float:
        """The `q`-th percentile (0 to 100) of the successful calls' latency, in ms."""
        return 1000 * percentile(self.ledger.seconds.get("OK", []), q)


def _channels(target: str, count: int) -> list[grpc.aio.Channel]:
    # A connection per channel (local subchannel pools): spread over --workers processes.
    options: list[tuple[str, int]] = [
        ("grpc.use_local_subchannel_pool", 1),
        ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ]
    return [grpc.aio.insecure_channel(target, options=[*options, ("kit.channel", i)]) for i in range(count)]


class _Window:
    def __init__(self, requests: Requests, warmup: float, seconds: float) -> None:
        self.start = time.perf_counter() + warmup
        self.end = self.start + seconds
        self.result = Measurement(seconds=seconds, texts_per_request=requests.texts_per_request)
        self.check = requests.check

    def record(self, began: float, code: str, reply: bytes | None) -> None:
        done = time.perf_counter()
        self.result.completed += 1
        if code == "OK" and self.check is not None and reply is not None:
            problem, self.check = self.check(reply), None
            if problem:
                raise RuntimeError(f"the server's reply is wrong: {problem}")
        if self.start <= done <= self.end:  # completions in the window, whenever they started
            self.result.ledger.open()
            self.result.ledger.close("", code, done - began if code == "OK" else None)


async def _call(
    stub: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes], body: bytes, timeout: float
) -> tuple[str, bytes | None]:
    try:
        reply: bytes = await stub(body, timeout=timeout)
    except grpc.aio.AioRpcError as error:
        return error.code().name, None
    return "OK", reply


def _stubs(pool: list[grpc.aio.Channel], method: str) -> list[grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]]:
    return [
        channel.unary_unary(method, request_serializer=None, response_deserializer=None) for channel in pool
    ]


async def closed_loop(
    target: str, requests: Requests, concurrency: int, seconds: float, *, warmup: float = 0.5,
    channels: int = 4, timeout: float = 30.0, calls: int | None = None,
) -> Measurement:  # fmt: skip
    """`concurrency` callers for `warmup` + `seconds`, or until `calls` calls were started."""
    pool = _channels(target, max(1, min(channels, concurrency)))
    stubs = _stubs(pool, requests.method)
    window = _Window(requests, warmup, seconds)
    started = itertools.count(1)
    bodies = [
        itertools.islice(itertools.cycle(requests.bodies), index % len(requests.bodies), None)
        for index in range(concurrency)
    ]

    async def step(index: int) -> None:
        began = time.perf_counter()
        code, reply = await _call(stubs[index % len(stubs)], next(bodies[index]), timeout)
        window.record(began, code, reply)

    try:
        await callers(
            concurrency,
            step,
            lambda: time.perf_counter() < window.end and (calls is None or next(started) <= calls),
        )
    finally:
        for channel in pool:
            await channel.close(None)
    return window.result


async def open_loop(
    target: str, requests: Requests, rate: float, seconds: float, *, warmup: float = 0.5,
    max_inflight: int = 2048, channels: int = 4, timeout: float = 30.0,
) -> Measurement:  # fmt: skip
    pool = _channels(target, channels)
    stubs = itertools.cycle(_stubs(pool, requests.method))
    bodies = itertools.cycle(requests.bodies)
    window = _Window(requests, warmup, seconds)
    inflight: set[asyncio.Task[None]] = set()

    async def one(stub: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes], body: bytes, began: float) -> None:
        code, reply = await _call(stub, body, timeout)
        window.record(began, code, reply)

    interval = 1.0 / rate
    next_at = time.perf_counter()
    try:
        while next_at < window.end:
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            if len(inflight) >= max_inflight:
                window.result.not_sent += next_at >= window.start
            else:
                task = asyncio.ensure_future(one(next(stubs), next(bodies), next_at))
                inflight.add(task)
                task.add_done_callback(inflight.discard)
            next_at += interval
        if inflight:
            await asyncio.wait(inflight, timeout=timeout + 1)
    finally:
        for channel in pool:
            await channel.close(None)
    return window.result


def run_closed(
    target: str, requests: Requests, concurrency: int, seconds: float, **kwargs: Any
) -> Measurement:
    return run_async(closed_loop(target, requests, concurrency, seconds, **kwargs))


def run_open(target: str, requests: Requests, rate: float, seconds: float, **kwargs: Any) -> Measurement:
    return run_async(open_loop(target, requests, rate, seconds, **kwargs))
