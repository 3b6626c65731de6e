"""The client's own account of every call it made, and the one percentile rule every figure uses.

A call is `open`ed just before it is sent and `close`d with the status it got (and, when timed,
how long it took); a call still open when a run ends is *abandoned* (`lost`): the server may
well have answered it, but the client cannot know how. Calls are counted per API (the
server's metrics label), so the ledger reconciles with the server's per-API counters.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import grpc

from attnserve.service.client import ClientError

# Statuses the client's side can produce on its own: not proof that the server answered.
# NO_STATUS closes a call that got none (cancelled, or stopped by the caller's own error).
NO_STATUS = "NO_STATUS"
CLIENT_SIDE = frozenset({"DEADLINE_EXCEEDED", "CANCELLED", NO_STATUS})


def percentile(values: Iterable[float], q: float) -> float:
    """The `q`-th percentile (0 to 100), interpolated linearly between the two nearest ranks
    (numpy's default rule); nan for no values."""
    data = sorted(values)
    if not data:
        return math.nan
    position = (len(data) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (position - low)


@dataclass
class Ledger:
    sent: Counter[str] = field(default_factory=Counter)  # api -> calls sent
    closed: Counter[tuple[str, str]] = field(default_factory=Counter)  # (api, code) -> calls answered
    details: dict[str, set[str]] = field(default_factory=dict)  # code -> error details (bounded)
    seconds: dict[str, list[float]] = field(default_factory=dict)  # code -> durations of timed calls

    def open(self, api: str = "") -> None:
        self.sent[api] += 1

    def close(self, api: str, code: str, seconds: float | None = None, detail: str | None = None) -> None:
        self.closed[(api, code)] += 1
        if seconds is not None:
            self.seconds.setdefault(code, []).append(seconds)
        if detail is not None:
            self.details.setdefault(code, set()).add(detail[:120])

    async def call(self, make: Callable[[], Awaitable[Any]], api: str = "") -> str:
        """Run one call, timed; returns the gRPC status name it ended with (NO_STATUS: it was
        cancelled before any status came)."""
        self.open(api)
        began = time.perf_counter()
        code, detail = NO_STATUS, None
        try:
            await make()
            code = "OK"
        except ClientError as exc:
            code, detail = exc.code.name, exc.details
        except grpc.RpcError as exc:
            code, detail = exc.code().name, exc.details() or ""
        finally:
            self.close(api, code, time.perf_counter() - began, detail)
        return code

    @property
    def started(self) -> int:
        return sum(self.sent.values())

    @property
    def ended(self) -> Counter[str]:
        """code -> calls that ended with it, over every API."""
        out: Counter[str] = Counter()
        for (_, code), count in self.closed.items():
            out[code] += count
        return out

    @property
    def lost(self) -> int:
        """Calls that started but never ended with a status."""
        ended = self.ended
        return self.started - sum(ended.values()) + ended[NO_STATUS]

    def abandoned(self) -> dict[str, int]:
        """api -> calls sent but never answered to the client."""
        answered: Counter[str] = Counter()
        for (api, _), count in self.closed.items():
            answered[api] += count
        return {api: self.sent[api] - answered[api] for api in self.sent if self.sent[api] != answered[api]}

    def answered_definitely(self) -> dict[str, int]:
        """api -> calls answered with a status only the server can have given (never a call
        `lost` counts)."""
        out: Counter[str] = Counter()
        for (api, code), count in self.closed.items():
            if code not in CLIENT_SIDE:
                out[api] += count
        return dict(out)

    def codes(self) -> dict[tuple[str, str], int]:
        return dict(self.closed)

    def ms(self, code: str, quantile: float) -> float:
        """The `quantile` (0 to 1) of the timed calls that ended with `code`, in ms."""
        return round(1000 * percentile(self.seconds.get(code, []), 100 * quantile), 2)

    def summary(self) -> dict[str, Any]:
        return {"sent": self.started, **dict(sorted(self.ended.items())), "lost": self.lost}
