"""A server's Prometheus metrics read from outside: the exposition text and its samples."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def scrape(url: str, timeout: float = 10.0) -> str:
    """The exposition text at `url` (http://host:port/metrics)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return str(response.read().decode())


def samples(text: str) -> Iterator[Sample]:
    for family in text_string_to_metric_families(text):
        yield from family.samples


def values(text: str, name: str, **labels: str) -> list[float]:
    """Values of the samples called `name` whose labels include `labels`."""
    return [
        float(s.value)
        for s in samples(text)
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
