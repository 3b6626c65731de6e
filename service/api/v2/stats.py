"""V2 model statistics, computed in one place for every transport.

`inference_count` (texts) and `execution_count` (batches) cover every batch the model ran,
whichever API its texts came from: a dynamic batch may merge both. The request durations
(`RequestStats`) cover this protocol's requests, over gRPC and REST alike.
"""

from __future__ import annotations

import weakref

from prometheus_client import Histogram

from attnserve.service.api.v2.types import ModelStats, RequestStats
from attnserve.service.engine.models.loading import LoadedModel


class StatsTable:
    """Request durations per loaded model version (dropped with the version)."""

    def __init__(self) -> None:
        self._stats: weakref.WeakKeyDictionary[LoadedModel, RequestStats] = weakref.WeakKeyDictionary()

    def of(self, model: LoadedModel) -> RequestStats:
        stats = self._stats.get(model)
        if stats is None:
            stats = self._stats[model] = RequestStats()
        return stats

    def statistics(self, model: LoadedModel) -> ModelStats:
        requests = self.of(model)
        executions, texts = _count_and_sum(model.metrics.batch_size)
        return ModelStats(
            name=model.name,
            version=str(model.version),
            last_inference=requests.last_inference_ms,
            inference_count=int(texts),
            execution_count=executions,
            requests=requests,
        )


def _count_and_sum(histogram: Histogram) -> tuple[int, float]:
    count, total = 0, 0.0
    for metric in histogram.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count"):
                count = int(sample.value)
            elif sample.name.endswith("_sum"):
                total = sample.value
    return count, total
