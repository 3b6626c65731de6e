"""What every API shares: admission of calls and the classify path.

An API servicer (attnserve.v1 in native.py, the V2 protocol beside it) converts its
request, calls `Core.classify` with a `LoadedModel` from `Core.repository.resolve`, and
converts the `Classified` result back; texts of all APIs join the same batcher.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from attnserve.service.engine.attention import AttentionMode, check_request, reply_bytes
from attnserve.service.engine.batching import Prediction
from attnserve.service.engine.metrics import Metrics
from attnserve.service.engine.model import LoadedModel
from attnserve.service.engine.repository import Repository
from attnserve.service.engine.tokenization import EncodedTexts
from attnserve.service.errors import (
    NOT_READY_MESSAGE,
    SHUTTING_DOWN_MESSAGE,
    InvalidArgument,
    ResourceExhausted,
    Unavailable,
)
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


@dataclass(slots=True)
class Classified:
    encoded: EncodedTexts
    prediction: Prediction
    tokenize_seconds: float


@dataclass(eq=False)
class Core:
    settings: Settings
    metrics: Metrics
    repository: Repository
    gate: Gate = field(default_factory=Gate)

    def __post_init__(self) -> None:
        self.gate.max_inflight_bytes = self.settings.max_inflight_bytes

    def check_texts(self, count: int) -> None:
        if count == 0:
            raise InvalidArgument("texts: at least one text is required")
        limit = self.settings.max_texts_per_request
        if count > limit:
            raise InvalidArgument(f"texts: {count} texts in one request; the limit is {limit}")

    def check_reply(self, model: LoadedModel, encoded: EncodedTexts, mode: AttentionMode) -> None:
        """Refuse up front a request whose reply would exceed `max_reply_bytes`: built anyway,
        it would fail at a client with the default receive limit after all the work."""
        lengths = encoded.lengths
        spec = model.manifest.attention
        # Per text besides attention: logits, probabilities, tokens and framing.
        estimate = sum(lengths) * 24 + len(lengths) * (16 * len(model.labels) + 64)
        estimate += reply_bytes(model.kind, spec.layers, spec.heads, mode, max(lengths), len(lengths))
        limit = self.settings.max_reply_bytes
        if estimate > limit:
            raise ResourceExhausted(
                f"reply: about {estimate} bytes for {len(lengths)} texts with {mode.name} attention, over "
                f"the limit of {limit} (max_reply_bytes; gRPC clients accept 4 MiB by default); ask for a "
                "smaller attention mode (POOLED, or NONE), fewer or shorter texts per request, or raise "
                "the client's receive limit and the server's max_reply_bytes"
            )

    async def classify(
        self,
        model: LoadedModel,
        texts: Sequence[str],
        mode: AttentionMode,
        top_k: int,
        deadline: float | None,
    ) -> Classified:
        """Validate, tokenize and run texts through `model`'s batcher."""
        self.check_texts(len(texts))
        check_request(model.kind, mode, top_k, model.name)
        started = time.perf_counter()
        encoded = model.encoder.encode(texts)
        tokenize_seconds = time.perf_counter() - started
        model.metrics.tokenize.observe(tokenize_seconds)
        self.check_reply(model, encoded, mode)
        prediction = await model.predict(encoded, mode, top_k, deadline)
        return Classified(encoded, prediction, tokenize_seconds)

    async def classify_ids(
        self,
        model: LoadedModel,
        encoded: EncodedTexts,
        mode: AttentionMode,
        top_k: int,
        deadline: float | None,
    ) -> Prediction:
        """For callers that tokenized themselves: rows of ids, padding already removed."""
        self.check_texts(len(encoded))
        check_request(model.kind, mode, top_k, model.name)
        vocab = model.encoder.vocab_size
        for index, (row, length) in enumerate(zip(encoded.ids, encoded.lengths, strict=True)):
            if not 1 <= length <= model.encoder.max_len:
                raise InvalidArgument(
                    f"input_ids row {index} has {length} tokens; each row needs 1 to {model.encoder.max_len}"
                )
            values = np.asarray(row)
            if values.min() < 0 or values.max() >= vocab:
                raise InvalidArgument(f"input_ids row {index} holds ids outside the vocabulary [0, {vocab})")
        self.check_reply(model, encoded, mode)
        return await model.predict(encoded, mode, top_k, deadline)
