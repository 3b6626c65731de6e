"""Bounded client-side load for reliability tests: a ledger of every call and its status,
and the figures each scenario reports (docs/results/reliability.md is filled from them).

Figures are printed (`pytest -s` shows them) and, when ATTNSERVE_FIGURES names a file,
appended to it as JSON lines; `python -m tests.support.load FILE` prints them as a table.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from attnserve.service.client import ClientError

FIGURES_ENV = "ATTNSERVE_FIGURES"


@dataclass
class Ledger:
    """Every call made: counted when it starts and again, with its status, when it ends."""

    started: int = 0
    ended: Counter[str] = field(default_factory=Counter)
    details: dict[str, set[str]] = field(default_factory=dict)
    seconds: dict[str, list[float]] = field(default_factory=dict)

    async def call(self, make: Callable[[], Awaitable[Any]]) -> str:
        """Run one call; returns the gRPC status name it ended with."""
        self.started += 1
        began = time.perf_counter()
        code = "NO_STATUS"
        try:
            await make()
            code = "OK"
        except ClientError as exc:
            code = exc.code.name
            self.details.setdefault(code, set()).add(exc.details[:120])
        except grpc.RpcError as exc:
            code = exc.code().name
            self.details.setdefault(code, set()).add((exc.details() or "")[:120])
        finally:
            self.ended[code] += 1
            self.seconds.setdefault(code, []).append(time.perf_counter() - began)
        return code

    @property
    def lost(self) -> int:
        """Calls that started but never ended with a status."""
        return self.started - sum(self.ended.values()) + self.ended["NO_STATUS"]

    def ms(self, code: str, quantile: float) -> float:
        values = sorted(self.seconds.get(code, []))
        if not values:
            return float("nan")
        return round(1000 * values[min(len(values) - 1, int(quantile * len(values)))], 2)

    def summary(self) -> dict[str, Any]:
        return {"sent": self.started, **dict(sorted(self.ended.items())), "lost": self.lost}


async def keep_calling(
    ledger: Ledger, make: Callable[[], Awaitable[Any]], *, workers: int, stop: asyncio.Event
) -> None:
    """`workers` loops calling back to back until `stop` is set."""

    async def loop() -> None:
        while not stop.is_set():
            await ledger.call(make)

    await asyncio.gather(*(loop() for _ in range(workers)))


def record_figures(scenario: str, **figures: Any) -> None:
    line = json.dumps({"scenario": scenario, **figures}, default=str)
    print(f"\nFIGURES {line}")
    target = os.environ.get(FIGURES_ENV)
    if target:
        with Path(target).open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")


def main(path: str) -> None:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    for row in rows:
        scenario = row.pop("scenario")
        print(f"| {scenario} | " + ", ".join(f"{k} {v}" for k, v in row.items()) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
