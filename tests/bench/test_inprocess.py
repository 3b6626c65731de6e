"""bench.inprocess drives the engine and the V2 handler of a real, non-listening server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench.inprocess import main, measure


def test_both_layers_are_measured_at_every_level(model_repository: Path) -> None:
    points = asyncio.run(measure(model_repository, "car", [1, 4], 60, ["engine", "v2"]))
    assert [(p.layer, p.concurrency) for p in points] == [("engine", 1), ("engine", 4), ("v2", 1), ("v2", 4)]
    for point in points:
        assert point.calls == 60 and point.calls_per_s > 0
        assert point.total_ms > 0 and point.model_ms > 0
        assert 1.0 <= point.mean_batch <= point.concurrency  # one text per call, at most c in flight
    alone = [p for p in points if p.concurrency == 1]
    assert all(p.mean_batch == 1.0 for p in alone)


def test_an_unknown_layer_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--layers", "engine,grpc"])
    assert exit_info.value.code == 2
    assert "unknown grpc" in capsys.readouterr().err


def test_a_missing_model_is_one_line_and_status_2(
    model_repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--repository", str(model_repository), "--model", "nope", "--levels", "1"]) == 2
    assert "no model named 'nope'" in capsys.readouterr().err
