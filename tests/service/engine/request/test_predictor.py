"""A served version's predictor lives exactly as long as the repository serves the version:
opened before it is published, closed (its batcher threads stopped) when it is retired."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from attnserve.service.engine.admission import Gate, Permit
from attnserve.service.engine.context import CallContext
from attnserve.service.engine.limits import CallLimits
from attnserve.service.engine.metrics import Metrics
from attnserve.service.engine.models.repository import Repository
from attnserve.service.engine.request.classify import Inputs, run
from attnserve.service.engine.request.predictor import Predictors
from attnserve.service.errors import Unavailable
from tests.support.servers import make_settings


def _batcher_threads(name: str) -> list[str]:
    return [thread.name for thread in threading.enumerate() if thread.name.startswith(f"batcher-{name}-")]


def test_the_repository_opens_and_closes_each_versions_predictor(repository: Path) -> None:
    async def scenario() -> None:
        settings = make_settings(repository, max_concurrent_batches=2)
        predictors = Predictors(settings)
        served = Repository(settings, Metrics(CollectorRegistry()), predictors)
        await served.load_all()
        try:
            car, pool = served.resolve("car"), served.resolve("pool")
            assert predictors.of(pool).model is pool
            assert len(_batcher_threads("car/1")) == 2
            inputs = Inputs(texts=["a white car", "a red car"])
            limits = CallLimits(max_texts_per_request=8, max_reply_bytes=1 << 20)
            out = await run(predictors.of(car), inputs, limits, CallContext(Permit(Gate(), counted=False)))
            assert out.label_ids.shape == (2,) and out.probabilities.shape == (2, len(car.labels))

            (withdrawn,) = served.withdraw("car")
            assert withdrawn is car
            predictors.of(car)  # withdrawn, not yet retired: calls that resolved it still run
            await served.retire(car)
            with pytest.raises(Unavailable, match="being unloaded"):
                predictors.of(car)
            assert _batcher_threads("car/1") == []
            assert len(_batcher_threads("pool/1")) == 2
        finally:
            await served.close()
        with pytest.raises(Unavailable):
            predictors.of(pool)
        assert _batcher_threads("pool/1") == []

    asyncio.run(scenario())
