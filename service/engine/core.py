"""What every API shares: admission of calls and the classify path.

A front end (attnserve.v1 in api/native.py, V2 in api/v2/, HTTP) resolves a `LoadedModel`
with `Core.repository.resolve`, converts its request into `Inputs`, awaits
`Core.classify(model, inputs)` and converts the `Outputs` back; texts of all APIs join the
same batcher.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from attnserve.service.engine.classify import Inputs, Outputs, classify
from attnserve.service.engine.metrics import Metrics
from attnserve.service.engine.model import LoadedModel
from attnserve.service.engine.repository import Repository
from attnserve.service.errors import NOT_READY_MESSAGE, SHUTTING_DOWN_MESSAGE, ResourceExhausted, Unavailable
from attnserve.service.settings import Settings


class State(enum.Enum):
    STARTING = "starting"
    SERVING = "serving"
    DRAINING = "draining"


@dataclass(eq=False)
class Gate:
    """Admits calls only while serving and counts those in progress (for draining)."""

    state: State = State.STARTING
    active: int = 0
    refused_at: float = 0.0  # time.monotonic() of the last call refused while not serving
    max_inflight_bytes: int = 0  # 0: no limit
    inflight_bytes: int = 0
    _idle: asyncio.Event = field(default_factory=asyncio.Event)
    _on_drain: list[Callable[[], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._idle.set()

    def admit(self, size: int = 0) -> None:
        """Count a call in, holding `size` bytes of its request (see `reserve`)."""
        if self.state is not State.SERVING:
            self.refused_at = time.monotonic()
            raise Unavailable(NOT_READY_MESSAGE if self.state is State.STARTING else SHUTTING_DOWN_MESSAGE)
        self.reserve(size)
        self.active += 1
        self._idle.clear()

    def release(self, size: int = 0) -> None:
        self.unreserve(size)
        self.active -= 1
        if self.active == 0:
            self._idle.set()

    def reserve(self, size: int) -> None:
        """Hold `size` bytes of request bodies in progress (decoded, tokenized, queued: a
        body's texts stay queued as long as its call is in progress). RESOURCE_EXHAUSTED
        beyond `max_inflight_bytes`; a body alone over the limit is still taken when nothing
        else is in progress, since the message size limit has let it in."""
        limit = self.max_inflight_bytes
        if limit and self.inflight_bytes and self.inflight_bytes + size > limit:
            raise ResourceExhausted(
                f"the server holds {self.inflight_bytes} bytes of requests in progress and the limit "
                f"(max_inflight_bytes) is {limit}; retry with backoff"
            )
        self.inflight_bytes += size

    def unreserve(self, size: int) -> None:
        self.inflight_bytes -= size

    @property
    def draining(self) -> bool:
        return self.state is State.DRAINING

    def watch(self, callback: Callable[[], None]) -> None:
        """Call `callback` when draining starts (streams use it to stop taking work)."""
        self._on_drain.append(callback)

    def unwatch(self, callback: Callable[[], None]) -> None:
        self._on_drain.remove(callback)

    def drain(self) -> None:
        self.state = State.DRAINING
        # Calls grpc has received but the event loop has not reached yet are invisible here;
        # counting the drain's start as a refusal gives them a quiet period to be answered.
        self.refused_at = time.monotonic()
        for callback in list(self._on_drain):
            callback()

    async def wait_idle(self) -> None:
        await self._idle.wait()

    async def wait_quiet(self, quiet: float, deadline: float) -> None:
        """Wait until no call has been refused for `quiet` seconds (or until `deadline`).

        Closing the port resets (CANCELLED) every call grpc holds that the event loop has not
        reached; refusing calls with UNAVAILABLE until the clients have gone elsewhere avoids
        that."""
        while (now := time.monotonic()) < deadline and now - self.refused_at < quiet:
            await asyncio.sleep(min(quiet - (now - self.refused_at), deadline - now))


@dataclass(eq=False)
class Core:
    settings: Settings
    metrics: Metrics
    repository: Repository
    gate: Gate = field(default_factory=Gate)

    def __post_init__(self) -> None:
        self.gate.max_inflight_bytes = self.settings.max_inflight_bytes

    async def classify(self, model: LoadedModel, inputs: Inputs) -> Outputs:
        """The engine's entry point for every front end (see engine/classify.py)."""
        settings = self.settings
        return await classify(model, inputs, settings.max_texts_per_request, settings.max_reply_bytes)
