"""Admission: whether the server takes a call, and the request bytes it holds while it runs.

`Gate` is the server's: its state (starting, serving, draining), the calls in progress
(shutdown waits for them) and the bytes of request bodies in progress (bounded by
`max_inflight_bytes`). `Permit` is one call's hold on it, taken once at the transport edge
when the call arrives (refused UNAVAILABLE at once while the server starts or drains),
holding the body's bytes (an oversized backlog is refused before the body is parsed),
handed to the engine with the call (`Core.classify(model, inputs, context)`) and released
once by the call layer when the call ends.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from attnserve.service.errors import NOT_READY_MESSAGE, SHUTTING_DOWN_MESSAGE, ResourceExhausted, Unavailable


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

    @property
    def serving(self) -> bool:
        return self.state is State.SERVING

    @property
    def draining(self) -> bool:
        return self.state is State.DRAINING

    def refusal(self) -> Unavailable:
        """A new error for a call refused in the current state (counted for `wait_quiet`)."""
        self.refused_at = time.monotonic()
        return Unavailable(NOT_READY_MESSAGE if self.state is State.STARTING else SHUTTING_DOWN_MESSAGE)

    def try_acquire_permit(self, hold: int | None = None) -> Permit:
        """A new call's permit, counted in; refused UNAVAILABLE at once unless serving (before
        its body is parsed: refusing costs no work then). `hold`: its body's bytes, held at
        once (RESOURCE_EXHAUSTED beyond the limit; then nothing is taken)."""
        if self.state is not State.SERVING:
            raise self.refusal()
        if hold is not None:
            self.reserve(hold)
        self.active += 1
        self._idle.clear()
        return Permit(self, counted=True, held=hold or 0)

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

    def release(self, size: int, counted: bool) -> None:
        """A permit given back: `size` bytes it held, and the call if it was `counted`."""
        self.inflight_bytes -= size
        if counted:
            self.active -= 1
            if self.active == 0:
                self._idle.set()

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


class Permit:
    """One call's hold on the gate, taken once when the call arrives (`Gate.try_acquire_permit`)
    and released once when it ends: counted among the calls in progress (shutdown waits for
    them) and holding the bytes of its request body (`hold`). The engine runs only calls that
    carry one (`Core.classify`).

    A stream's message gets a permit within the stream's (`within`): the stream is counted,
    so its messages hold bytes only, and a message read before the drain began is served."""

    __slots__ = ("_counted", "_gate", "_held", "live")

    def __init__(self, gate: Gate, counted: bool, held: int = 0) -> None:
        self._gate = gate
        self._counted = counted
        self._held = held  # bytes already reserved on the gate for it
        self.live = True  # taken and not yet released

    def within(self, hold: int | None = None) -> Permit:
        """A permit for one message of this call's stream: bytes only, not counted (`hold`: the
        message's, held at once)."""
        if hold is not None:
            self._gate.reserve(hold)
        return Permit(self._gate, counted=False, held=hold or 0)

    def hold(self, size: int) -> None:
        """Hold `size` more bytes of request body (ResourceExhausted beyond the limit)."""
        self._gate.reserve(size)
        self._held += size

    def release(self) -> None:
        """Give back what the call holds; safe to call more than once."""
        if not self.live:
            return
        self.live = False
        held, self._held = self._held, 0
        self._gate.release(held, self._counted)
