"""Every section of the serving suite in tiny mode against real servers on 127.0.0.1: outputs, not speed."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from attnserve.service.bundle import read_bundle
from bench.cli import main
from bench.serving.profiling import py_spy
from bench.serving.report import BEGIN, END, PAGE
from bench.serving.tools import problem
from tests.bench.conftest import MODEL, docs_copy, missing_tool, points, run_suite

ROOT = Path(__file__).resolve().parents[2]


def test_ceiling_measures_each_batch_and_publishes_into_the_docs(
    bench_repository: Path, tmp_path: Path
) -> None:
    docs = docs_copy(tmp_path, ROOT, (str(PAGE),))
    results = run_suite(bench_repository, tmp_path / "run", "ceiling", "--publish", str(docs))
    rows = results["ceiling"]
    assert {(row["threads"], row["batch"]) for row in rows} >= {(1, 1), (1, 32)}
    assert all(row["excluded"] > 0 and row["included"] > 0 and row["attention"] > 0 for row in rows)
    page = (docs / PAGE).read_text()
    generated = page.split(BEGIN, 1)[1].split(END, 1)[0]
    assert "## attnserve benchmark (tiny mode" in generated and "Ceiling" in generated
    assert "python -m bench --tiny" in generated  # the command that made it
    assert page.split(BEGIN, 1)[0].startswith("# ")  # the hand-written part is kept
    for name in ("throughput_vs_concurrency.png", "rss_over_time.png"):
        assert (docs / "img" / f"bench_{name}").is_file()
        assert f"../img/bench_{name}" in generated
    # An earlier run renders again from its results.json alone, to the same report.
    report = (tmp_path / "run" / "report.md").read_text()
    (tmp_path / "run" / "report.md").unlink()
    assert main(["--from", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / "report.md").read_text() == report


@pytest.mark.slow  # four server setups, and perf_analyzer on one
def test_native_and_v2_sweep_every_setup(bench_repository: Path, tmp_path: Path) -> None:
    if (why := problem("perf_analyzer")) is not None:
        missing_tool(why)
    results = run_suite(bench_repository, tmp_path, "native,v2")
    native = points(results, "attnserve native")
    setups = {(p["workers"], p["batching"], p["attention"], p["texts"]) for p in native}
    assert setups == {
        (w, b, a, t) for w in (1, 2) for b in (True, False) for a in (True, False) for t in (1, 32)
    }
    failed = [p for p in native if not (p["texts_per_s"] > 0 and p["error_share"] == 0)]
    assert not failed, failed
    # The server's own histogram: batching off means one text per model call.
    assert all(p["mean_batch"] == 1 for p in native if not p["batching"])
    assert points(results, "attnserve V2") and all(
        p["texts_per_s"] > 0 for p in points(results, "attnserve V2")
    )
    perf = points(results, "attnserve V2 (perf_analyzer)")
    assert {p["texts"] for p in perf} == {1, 32}
    assert all(p["texts_per_s"] > 0 and p["error_share"] == 0 for p in perf), perf
    report = (tmp_path / "report.md").read_text()
    assert "## 2. attnserve native API" in report and "perf_analyzer" in report


def test_naive_baseline_is_driven_by_the_same_requests(bench_repository: Path, tmp_path: Path) -> None:
    results = run_suite(bench_repository, tmp_path, "naive")
    naive = points(results, "naive")
    assert {(p["attention"], p["texts"]) for p in naive} == {(a, t) for a in (True, False) for t in (1, 32)}
    assert all(p["texts_per_s"] > 0 and p["error_share"] == 0 for p in naive), naive


@pytest.mark.slow  # creates MLServer's environment (pip) on first use
def test_mlserver_serves_the_same_bundle_in_its_own_environment(
    bench_repository: Path, tmp_path: Path
) -> None:
    if os.environ.get("ATTNSERVE_SKIP_MLSERVER"):
        pytest.skip("ATTNSERVE_SKIP_MLSERVER is set: the MLServer comparison and its environment are skipped")
    results = run_suite(bench_repository, tmp_path, "mlserver")
    served = points(results, "MLServer")
    assert {p["texts"] for p in served} == {1, 32}
    assert all(p["texts_per_s"] > 0 and p["error_share"] == 0 for p in served), served


def test_memory_samples_idle_requests_and_soak(bench_repository: Path, tmp_path: Path) -> None:
    memory = run_suite(bench_repository, tmp_path, "memory")["memory"]
    assert memory["requests"] == 200
    assert memory["idle_mb"] > 0 and memory["after_requests_mb"] > 0 and memory["soak_end_mb"] > 0
    assert memory["capacity"] > 0 and memory["soak_rate"] == pytest.approx(0.7 * memory["capacity"])
    assert {s["phase"] for s in memory["samples"]} >= {"idle", "requests", "soak"}
    assert memory["soak_error_share"] == 0


def test_sequence_length_curve_and_padding_comparison(bench_repository: Path, tmp_path: Path) -> None:
    seqlen = run_suite(bench_repository, tmp_path, "seqlen")["seqlen"]
    max_len = read_bundle(bench_repository / MODEL / "1").manifest.max_len
    lengths = sorted(int(t) for t in seqlen["raw_texts_per_s"])
    assert lengths[0] == 8 and lengths[-1] == max_len
    assert sorted(int(t) for t in seqlen["service"]) == lengths
    assert all(p["texts_per_s"] > 0 for p in seqlen["service"].values())
    assert set(seqlen["padding"]) == {
        "length buckets", "arrival order, pad to batch's longest", "pad every batch to max_len",
    }  # fmt: skip
    assert all(not math.isnan(v) and v > 0 for v in seqlen["padding"].values())


def test_profile_under_load_names_where_the_time_goes(bench_repository: Path, tmp_path: Path) -> None:
    if py_spy() is None:
        missing_tool("py-spy is not installed (pip install -e '.[dev]')")
    profile = run_suite(bench_repository, tmp_path, "profile")["profile"]
    assert profile["summary"]["samples"] > 0
    kinds = profile["summary"]["kinds"]
    assert kinds["onnxruntime Session.run (inference thread)"] > 0, kinds
    assert sum(profile["thread_cpu_s"].values()) > 0
    assert "kind of work" in (tmp_path / "profile.md").read_text()
    assert (tmp_path / "profile.txt").stat().st_size > 0


def test_a_missing_model_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert main(["--tiny", "--repository", str(tmp_path), "--model", MODEL, "--out", str(out)]) == 2
    assert "no model 'car'" in capsys.readouterr().err
