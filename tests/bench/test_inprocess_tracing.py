"""`python -m bench inprocess --tracing`: the V2 layer traced at each ratio into a real receiver."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cli import main
from tests.bench.conftest import MODEL


def test_inprocess_tiny_measures_tracing_off_and_on_and_exports_the_spans(
    bench_repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["inprocess", "--tiny", "--repository", str(bench_repository), "--model", MODEL]
    assert main([*argv, "--layers", "v2", "--levels", "1", "--tracing", "off,1"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if " calls/s " in line]
    assert [line.split()[3] for line in lines] == ["off", "1"], out
    # 60 calls traced at 1 (warm-up included): a server span and five stage spans each, and
    # a batch span per batch, all exported before the point's CPU was read.
    (received,) = [line for line in out.splitlines() if "spans received" in line]
    assert int(received.split()[-1]) >= 2 * 60 * 7, out


def test_inprocess_refuses_a_ratio_outside_0_1(bench_repository: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["inprocess", "--tiny", "--repository", str(bench_repository), "--tracing", "off,2"])
    assert exit_info.value.code == 2
