"""bench/http_bench.py end to end at a tiny size: every path answers and the table is complete
(its figures mean nothing at this size; docs/benchmarks.md holds a real run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import http_bench


def test_every_path_is_measured_and_compared_with_grpc(
    model_repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--repository", str(model_repository), "--model", "car", "--seconds", "0.3", "--rounds", "1"]
    assert http_bench.main([*argv, "--concurrency", "1", "--per-call", "1", "32"]) == 0
    rows = [
        line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "---" not in line
    ]
    table = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[1:]]
    assert [(r[0], r[1]) for r in table] == [(path, n) for n in ("1", "32") for path in http_bench.PATHS]
    assert all(float(r[3]) > 0 for r in table)
    assert {r[6] for r in table if r[0] == "grpc native"} == {"1.00"}
