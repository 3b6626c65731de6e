"""Bounded client-side load for reliability tests: kit's call ledger and load generator, and
the figures each scenario reports (docs/results/reliability.md is filled from them).

Figures are printed (`pytest -s` shows them) and, when ATTNSERVE_FIGURES names a file,
appended to it as JSON lines; `python -m tests.support.load FILE` prints them as a table.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from kit.ledger import Ledger as Ledger
from kit.load import keep_calling as keep_calling

FIGURES_ENV = "ATTNSERVE_FIGURES"


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
