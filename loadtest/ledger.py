"""The client's own account of every call it made, kept for reconciliation with the server.

A call is `opened` just before it is sent and `closed` with the status it got; a call still
open when the run ends (its user was stopped mid-call) is *abandoned*: the server may well
have answered it, but the client cannot know how. Calls the client never sent (open-loop
arrivals dropped because too many calls were already in flight) are counted apart.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Ledger:
    sent: Counter[str] = field(default_factory=Counter)  # api -> calls sent
    closed: Counter[tuple[str, str]] = field(default_factory=Counter)  # (api, code) -> calls answered
    expected_errors: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (api, kind, code)
    # (api, kind, expected code, code got)
    wrong_status: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)
    bad_replies: Counter[tuple[str, str]] = field(default_factory=Counter)  # (api, problem)
    not_sent: Counter[str] = field(default_factory=Counter)  # api -> open-loop arrivals dropped
    texts_ok: int = 0

    def open(self, api: str) -> None:
        self.sent[api] += 1

    def close(self, api: str, code: str) -> None:
        self.closed[(api, code)] += 1

    def abandoned(self) -> dict[str, int]:
        """api -> calls sent but never answered to the client."""
        answered: Counter[str] = Counter()
        for (api, _), count in self.closed.items():
            answered[api] += count
        return {api: self.sent[api] - answered[api] for api in self.sent if self.sent[api] != answered[api]}

    def answered_definitely(self) -> dict[str, int]:
        """api -> calls answered with a status only the server can have given (not a deadline
        or a cancellation, which the client's side may produce on its own)."""
        out: Counter[str] = Counter()
        for (api, code), count in self.closed.items():
            if code not in ("DEADLINE_EXCEEDED", "CANCELLED"):
                out[api] += count
        return dict(out)

    def codes(self) -> dict[tuple[str, str], int]:
        return dict(self.closed)

    @property
    def unexpected(self) -> int:
        return sum(self.wrong_status.values()) + sum(self.bad_replies.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "sent": dict(self.sent),
            "closed": [{"api": a, "code": c, "count": n} for (a, c), n in sorted(self.closed.items())],
            "abandoned": self.abandoned(),
            "expected_errors": [
                {"api": a, "kind": k, "code": c, "count": n}
                for (a, k, c), n in sorted(self.expected_errors.items())
            ],
            "wrong_status": [
                {"api": a, "kind": k, "expected": w, "got": g, "count": n}
                for (a, k, w, g), n in sorted(self.wrong_status.items())
            ],
            "bad_replies": [
                {"api": a, "problem": p, "count": n} for (a, p), n in sorted(self.bad_replies.items())
            ],
            "not_sent": dict(self.not_sent),
            "texts_ok": self.texts_ok,
        }

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
