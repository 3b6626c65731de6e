"""Freed memory goes back to the operating system after data preparation."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from attnserve.training.loop.memory import release_unused_memory


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS line")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and trims glibc's heap")
def test_freed_heap_memory_is_returned() -> None:
    # Long strings come from the C heap (small ones from Python's own arenas), like a corpus.
    texts = [("word " * 200) + str(i) for i in range(200_000)]  # about 200 MB
    keep = texts[-1]
    held = rss_mb()
    del texts
    freed_but_resident = rss_mb()
    release_unused_memory()
    assert rss_mb() < min(held, freed_but_resident) - 100, (held, freed_but_resident, rss_mb())
    assert keep.endswith("199999")  # what is still referenced is untouched
