"""How much each benchmark measures in each mode: `full` (the published figures), `quick`
(a few minutes, same shape), `tiny` (seconds per section: CI runs it so nothing rots)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    name: str
    concurrencies: tuple[int, ...]
    texts_per_request: tuple[int, ...]
    workers: tuple[int, ...]
    seconds: float  # measuring window per point
    warmup: float
    ceiling_seconds: float
    ceiling_batches: tuple[int, ...]
    perf_interval_ms: int
    perf_trials: int
    memory_requests: int  # single-text calls before the "after N requests" sample
    soak_seconds: float
    rss_every: float  # seconds between RSS samples
    seqlen_points: int  # lengths between 8 and max_len
    seqlen_concurrency: int
    profile_seconds: float
    saturation: int = 64  # the concurrency of the "at c=64" ratios
    perf_every_setup: bool = True  # perf_analyzer on every server setup, or on the first only


PLANS = {
    "full": Plan(
        name="full", concurrencies=(1, 4, 16, 64, 256), texts_per_request=(1, 32), workers=(1, 2),
        seconds=3.0, warmup=1.0, ceiling_seconds=2.0, ceiling_batches=(1, 8, 32, 64, 128),
        perf_interval_ms=3000, perf_trials=5, memory_requests=100_000, soak_seconds=600.0, rss_every=3.0,
        seqlen_points=7, seqlen_concurrency=64, profile_seconds=20.0,
    ),
    "quick": Plan(
        name="quick", concurrencies=(1, 16, 64, 256), texts_per_request=(1, 32), workers=(1, 2),
        seconds=1.5, warmup=0.5, ceiling_seconds=0.7, ceiling_batches=(1, 32, 128),
        perf_interval_ms=1500, perf_trials=3, memory_requests=20_000, soak_seconds=60.0, rss_every=1.0,
        seqlen_points=4, seqlen_concurrency=64, profile_seconds=10.0,
    ),
    "tiny": Plan(
        name="tiny", concurrencies=(4,), texts_per_request=(1, 32), workers=(1, 2),
        seconds=0.3, warmup=0.1, ceiling_seconds=0.05, ceiling_batches=(1, 32),
        perf_interval_ms=300, perf_trials=3, memory_requests=200, soak_seconds=2.0, rss_every=0.25,
        seqlen_points=2, seqlen_concurrency=4, profile_seconds=1.5, saturation=4, perf_every_setup=False,
    ),
}  # fmt: skip


def lengths(max_len: int, points: int) -> list[int]:
    """`points` token lengths from 8 (or less for a tiny max_len) up to max_len, doubling-ish."""
    low = min(8, max_len)
    if points <= 1 or low == max_len:
        return [max_len]
    ratio = (max_len / low) ** (1 / (points - 1))
    out = sorted({min(max_len, round(low * ratio**i)) for i in range(points)})
    return out if out[-1] == max_len else [*out, max_len]
