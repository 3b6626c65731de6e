"""The serving sections of `python -m bench` at their --tiny size: peers, inprocess, http."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from bench.cli import main
from bench.serving.http import PATHS
from bench.serving.inprocess import measure
from bench.serving.peer_report import PEERS_BEGIN as BEGIN
from bench.serving.peer_report import PEERS_END as END
from bench.serving.peer_report import PEERS_PAGE as PAGE
from bench.serving.peer_report import dump, load, render
from bench.serving.tools import problem
from kit.results import Point
from tests.bench.conftest import MODEL

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # three servers, raw onnxruntime between the 32-text points: about 15 s
def test_peers_measures_attnserve_and_renders_and_publishes_a_run_again(
    bench_repository: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    argv = ["peers", "--tiny", "--repository", str(bench_repository), "--model", MODEL, "--out", str(out)]
    if problem("perf_analyzer") is not None:  # the systems perf_analyzer drives need it: leave them out
        argv += ["--systems", "native-w1"]
    assert main(argv) == 0
    results = json.loads((out / "peers.json").read_text())
    own = [p for p in results["points"] if p["generator"] == "own" and p["system"] == "attnserve w1"]
    assert {(p["api"], p["workload"]) for p in own} >= {("native", "text16"), ("native", "text16x32")}
    assert all(p["rps"] > 0 and p["cpu_ms_per_call"] > 0 for p in own), own
    assert results["raw_32_texts_per_s"] > 0 and len(results["load_average"]) == 3
    assert (out / "peers.png").read_bytes()[:4] == b"\x89PNG"
    report = (out / "peers.md").read_text()
    assert "### Goals" in report and "python -m bench peers --levels 2" in report  # --tiny's flags
    # An earlier run is rendered and published from its peers.json alone.
    docs = tmp_path / "docs"
    assert main(["peers", "--from", str(out / "peers.json"), "--publish", str(docs)]) == 0
    page = (docs / PAGE).read_text()
    assert page.startswith("# ") and "### Goals" in page.split(BEGIN, 1)[1].split(END, 1)[0]
    assert (docs / "img" / "bench_peers.png").is_file()


def test_a_peers_json_from_before_points_were_one_type_renders(tmp_path: Path) -> None:
    earlier = load(
        ROOT / "docs" / "results" / "peers" / "quiet-2026-11-26.json"
    )  # calls_per_s, texts_per_call
    assert all(isinstance(p, Point) and p.rps > 0 for p in earlier["points"])
    report = render(earlier, tmp_path)
    assert "### Goals" in report and "| v2 | perf_analyzer | text16 | unary | 8 |" in report
    dump(earlier, tmp_path / "peers.json")
    again = load(tmp_path / "peers.json")["points"]
    assert json.dumps([p.as_dict() for p in again]) == json.dumps([p.as_dict() for p in earlier["points"]])


def test_peers_from_renders_a_run_beside_the_one_before_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "peers.json"
    shutil.copy(ROOT / "docs" / "results" / "peers" / "quiet-2026-11-26.json", run)
    assert main(["peers", "--from", str(run), "--before", str(run)]) == 0
    out = capsys.readouterr().out
    assert "| goal | before | after | met |" in out and "### Before (same command)" in out
    assert (tmp_path / "peers.md").read_text() == out.removesuffix("\n")
    assert (tmp_path / "peers.png").is_file()


def test_peers_without_the_model_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["peers", "--tiny", "--repository", str(tmp_path), "--model", MODEL]) == 2
    assert "no model 'car'" in capsys.readouterr().err


def test_inprocess_measures_both_layers_at_every_level(bench_repository: Path) -> None:
    # /proc counts CPU in 10 ms ticks: 400 calls of about 0.1 ms each span several of them,
    # where 60 could fall between two ticks and read 0.
    points = asyncio.run(measure(bench_repository, MODEL, [1, 4], 400, ["engine", "v2"]))
    assert [(p.system, p.concurrency) for p in points] == [("engine", 1), ("engine", 4), ("v2", 1), ("v2", 4)]
    for point in points:
        assert point.calls == 400 and point.rps > 0
        assert point.cpu_ms_per_call > 0 and point.cpu_ms_per_call_no_model is not None
        assert point.cpu_ms_per_call_no_model < point.cpu_ms_per_call  # the model's share taken out
        assert point.mean_batch is not None and 1.0 <= point.mean_batch <= point.concurrency
    assert all(p.mean_batch == 1.0 for p in points if p.concurrency == 1)


def test_inprocess_tiny_runs_and_refuses_bad_input(
    bench_repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inprocess", "--tiny", "--repository", str(bench_repository), "--model", MODEL]) == 0
    assert capsys.readouterr().out.count(" calls/s ") == 4
    assert main(["inprocess", "--tiny", "--repository", str(bench_repository), "--model", "nope"]) == 2
    assert "no model named 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["inprocess", "--layers", "engine,grpc"])
    assert exit_info.value.code == 2
    assert "unknown grpc" in capsys.readouterr().err


def test_http_measures_every_path_beside_grpc(
    bench_repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["http", "--tiny", "--repository", str(bench_repository), "--model", MODEL]) == 0
    rows = [
        line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "---" not in line
    ]
    table = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[1:]]
    assert [(r[0], r[1]) for r in table] == [(path, n) for n in ("1", "32") for path in PATHS]
    assert all(float(r[3]) > 0 for r in table)
    assert {r[6] for r in table if r[0] == "grpc native"} == {"1.00"}
