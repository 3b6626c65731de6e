"""The supervisor's /metrics under `--workers N`: every worker's prometheus_client files, summed.

prometheus_client's own `MultiProcessCollector` fails a whole scrape (HTTP 500) on one file it
cannot read yet: a worker creates its file at 0 bytes and sizes it a moment later, and a
worker killed in that moment leaves the empty file for good (prometheus/client_python#1199).
"""

from __future__ import annotations

import glob
import logging
import os
import struct
import time
from collections.abc import Iterable

from prometheus_client import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)
HEADER_BYTES = 8  # a sized file's first 8 bytes: how much of it is used, then padding
_RETRIES = 2
_RETRY_S = 0.005


def readable(files: Iterable[str]) -> list[str]:
    """The files past their creation: at least a header long. An empty file has recorded
    nothing yet (its writer sizes it before its first value), so leaving it out loses nothing."""
    kept = []
    for path in files:
        try:
            if os.stat(path).st_size >= HEADER_BYTES:
                kept.append(path)
        except FileNotFoundError:  # a dead worker's live gauges, removed since the glob
            continue
    return kept


class WorkerFiles(Collector):
    """The merged metrics of the workers writing into `directory`."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def collect(self) -> Iterable[Metric]:
        for _ in range(_RETRIES):
            try:
                return self._merged()
            except (struct.error, RuntimeError, ValueError) as exc:
                # A file read while its writer appends: each retry reads every file afresh.
                log.warning("a worker's metrics file was unreadable (%s); reading again", exc)
                time.sleep(_RETRY_S)
        return self._merged()  # a file that still fails is corrupt: the scrape fails, loudly

    def _merged(self) -> list[Metric]:
        files = readable(glob.glob(os.path.join(self.directory, "*.db")))
        return list(MultiProcessCollector.merge(files, accumulate=True))  # type: ignore[no-untyped-call]
