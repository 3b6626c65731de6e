"""Why a load test ended with a non-zero status, in a few lines read from its reports.

Locust itself ends with "Shutting down (exit code 1)" whatever the cause; the reports say
which calls failed and how, whether the run started at all, and whether the counts
reconciled.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

PREFIX = "attnserve"
EXIT_FAILURES, EXIT_MISMATCH = 1, 3
_SHOWN = 5
# What a status under load usually means, for the one-line summary.
_HINTS = {
    "RESOURCE_EXHAUSTED": "the server shed load: its queue was full (lower --rate or --users)",
    "DEADLINE_EXCEEDED": "calls ran past their deadline (the server is saturated, or --deadline-ms is tight)",
    "UNAVAILABLE": "the server was unreachable or shutting down",
    "CANCELLED": "calls were cancelled (the run ended with calls in flight)",
}


def _failures(out: Path) -> Counter[str]:
    """Locust's failures report: error text -> occurrences, over every request name."""
    path = out / f"{PREFIX}_failures.csv"
    counts: Counter[str] = Counter()
    if not path.is_file():
        return counts
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            error = row.get("Error", "").removeprefix("StatusError(").removesuffix(")").strip("'\"")
            counts[error] += int(row.get("Occurrences") or 0)
    return counts


def explain(status: int, out: Path) -> list[str]:
    """Lines saying why `status` is not 0 (none when it is)."""
    if status == 0:
        return []
    ledger_path = out / f"{PREFIX}_ledger.json"
    if not ledger_path.is_file():
        return [
            f"loadtest: exit status {status}: the run did not start or was cut short "
            "(no ledger written); locust's messages above say why"
        ]
    ledger = json.loads(ledger_path.read_text())
    lines: list[str] = []
    failures = _failures(out)
    if failures:
        total = sum(failures.values())
        lines.append(f"loadtest: exit status {status}: {total} call(s) failed:")
        for error, count in failures.most_common(_SHOWN):
            hint = _HINTS.get(error)
            lines.append(f"  {count:>8}  {error}" + (f": {hint}" if hint else ""))
        if len(failures) > _SHOWN:
            lines.append(f"  ... and {len(failures) - _SHOWN} more kinds in {PREFIX}_failures.csv")
    not_sent = sum(ledger.get("not_sent", {}).values())
    if not_sent:
        lines.append(
            f"loadtest: {not_sent} open-loop arrival(s) were not sent: too many calls in flight "
            "(the server is slower than --rate; raise --max-inflight or lower --rate)"
        )
    if status == EXIT_MISMATCH:
        lines.append("loadtest: exit status 3: the server's counters do not match the client's (table above)")
    if not lines:
        lines.append(
            f"loadtest: exit status {status}, no failed call recorded; locust's messages above say why"
        )
    return lines
