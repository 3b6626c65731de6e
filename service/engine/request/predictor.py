"""A served model version's prediction: its runner and batcher, from serving to unloading.

The model lifecycle (engine/models/) loads and checks a version and hands the request path
a `LoadedModel` (bundle, tokenizer, session, metrics); it knows nothing of batching.
`Predictors` is the repository's `Serving` hook (engine/models/repository.py): when the
repository starts serving a version it opens a `Predictor` for it (a `Runner` over the
version's session and a `Batcher` with its threads), and when it retires the version it
closes that predictor, which first finishes the calls it accepted. Opening a version also
times its one-text batches on a thread of its own (cost.py), for the lone path's choice.
`Core` builds the `Predictors`, hands them to its `Repository` and finds a call's predictor
by the version the call resolved. So imports run one way, request -> models, and the
tracer reaches the runner as a constructor argument.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
from collections.abc import Iterator

from attnserve.service.common.vocabulary import AttentionMode
from attnserve.service.engine.context import CallContext
from attnserve.service.engine.limits import BatchLimits, batch_limits
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.models.tokenization import EncodedTexts
from attnserve.service.engine.request.batcher import Batcher
from attnserve.service.engine.request.cost import TextCost
from attnserve.service.engine.request.results import Outputs
from attnserve.service.engine.request.runner import (
    ATTENTION_LANE,
    LABEL_LANE,
    CallRows,
    Runner,
    gather,
)
from attnserve.service.errors import UNLOADING_MESSAGE, Unavailable
from attnserve.service.observe.tracing import Tracing
from attnserve.service.settings import Settings

log = logging.getLogger(__name__)


class Predictor:
    """One served version's runner and batcher (threads run while it is served)."""

    def __init__(self, model: LoadedModel, limits: BatchLimits, tracing: Tracing | None) -> None:
        self.model = model
        self.cost = TextCost()
        self.calls = 0  # calls that hold this version now (Predictors.serving)
        self._waiters: list[asyncio.Future[None]] = []
        name = f"{model.name}/{model.version}"
        self.batcher = Batcher(name, Runner(model, tracing), limits, model.metrics, lone_path=True)
        # The lane of a call that asks no attention: the label graph's, where the version has one.
        self._plain_lane = LABEL_LANE if model.label_runtime is not None else ATTENTION_LANE

    def lane(self, mode: AttentionMode, top_k: int) -> int:
        """The graph a call's reply needs: the label graph's lane when the version has one and
        the call asks no attention, so label batches never wait on or carry attention. Every
        row of the call (its attribution's too) runs on this one graph."""
        return ATTENTION_LANE if mode is not AttentionMode.NONE or top_k > 0 else self._plain_lane

    def leave(self) -> None:
        """A call that held this version (`Predictors.serving`) is done: the last one wakes
        what waits for it (`finished`)."""
        self.calls -= 1
        if self.calls == 0 and self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def finished(self) -> None:
        """Wait until every call that entered has left (each of its jobs submitted and done)."""
        if self.calls:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    def start(self) -> None:
        """Start the batcher threads, and time the model when lone calls may run on the loop
        (a thread of its own: a large model takes seconds; until then no call runs there)."""
        self.batcher.start()
        if self.batcher.lone_path:
            name = f"cost-{self.batcher.name}"
            threading.Thread(target=self._measure, name=name, daemon=True).start()

    def _measure(self) -> None:
        try:
            self.cost.measure(self.model)
        except Exception:  # the version still serves; its calls just never run on the loop
            log.exception("model %s: timing one-text batches failed", self.batcher.name)
            return
        log.info("model %s: one text timed: %s", self.batcher.name, self.cost.describe())

    async def predict(
        self,
        encoded: EncodedTexts,
        mode: AttentionMode,
        k: int,
        context: CallContext,
        lane: int | None = None,
        paced: bool = False,
        *,
        tokenize: float = 0.0,
        started: float = 0.0,
    ) -> Outputs:
        """Run encoded texts through the batcher on `lane` (None: the one the reply needs,
        `lane`; classify.run validates the texts first); `paced`: a call's attribution rows,
        which hold a bounded share of the queue; `tokenize`, `started`: the call's tokenizing
        seconds and arrival, for its timings."""
        attention = mode is not AttentionMode.NONE or k > 0
        if lane is None:
            lane = ATTENTION_LANE if attention else self._plain_lane
        request = CallRows(encoded.ids, mode, k, context.trace, attention)
        lengths = encoded.lengths
        # A one-text call's run time, predicted once here and carried by its job (inf: several
        # texts, or a request the version's timing does not know, or not yet timed).
        seconds = self.cost.seconds.get((mode, k > 0)) if len(lengths) == 1 else None
        predicted = math.inf if seconds is None else seconds[min(lengths[0], len(seconds) - 1)]
        job = await self.batcher.submit(
            request, lengths, context.deadline, lane, paced, predicted=predicted, alone=context.alone
        )
        return gather(job, request, encoded, tokenize, started)


class Predictors:
    """The predictor of every served version; opened and closed by the repository."""

    def __init__(self, settings: Settings, tracing: Tracing | None = None) -> None:
        self._limits = batch_limits(settings)
        self._tracing = tracing
        self._served: dict[LoadedModel, Predictor] = {}

    def open(self, model: LoadedModel) -> None:
        """Start the version's batcher threads (before calls can resolve it)."""
        if model.cascade is not None:  # a cascade runs on its members' own predictors
            for member in model.cascade.members:
                self.open(member)
            return
        if model not in self._served:
            predictor = Predictor(model, self._limits, self._tracing)
            predictor.start()
            self._served[model] = predictor

    async def close(self, model: LoadedModel) -> None:
        """Finish the version's accepted calls and stop its threads; later calls that still
        hold the version are refused UNAVAILABLE (retry: they resolve the new table). A call
        that entered before (`serving`) runs to its end, its attribution's rows included."""
        if model.cascade is not None:
            for member in model.cascade.members:
                await self.close(member)
            return
        predictor = self._served.pop(model, None)
        if predictor is not None:
            await predictor.finished()
            await predictor.batcher.close()

    @contextlib.contextmanager
    def serving(self, model: LoadedModel) -> Iterator[Predictor]:
        """The predictor of a version a call resolved, held for the call: closing the version
        waits until the call is done (refused UNAVAILABLE once the version is closing)."""
        predictor = self.of(model)
        predictor.calls += 1
        try:
            yield predictor
        finally:
            predictor.leave()

    def of(self, model: LoadedModel) -> Predictor:
        """The predictor of a version a call resolved."""
        predictor = self._served.get(model)
        if predictor is None:
            raise Unavailable(UNLOADING_MESSAGE)
        return predictor
