"""The load test's ledger: kit's call ledger (calls sent and answered, per API, for the
reconciliation with the server) plus what only a load test checks: expected errors, wrong
statuses, bad replies, and open-loop arrivals never sent because too many calls were in flight.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.ledger import Ledger


@dataclass
class LoadLedger(Ledger):
    expected_errors: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (api, kind, code)
    # (api, kind, expected code, code got)
    wrong_status: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)
    bad_replies: Counter[tuple[str, str]] = field(default_factory=Counter)  # (api, problem)
    not_sent: Counter[str] = field(default_factory=Counter)  # api -> open-loop arrivals dropped
    texts_ok: int = 0

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
