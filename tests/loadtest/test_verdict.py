"""A load test that fails says why on its last lines, not only locust's "exit code 1"."""

from __future__ import annotations

from pathlib import Path

from tests.loadtest.conftest import MODEL, metrics_url, run_loadtest
from tests.support.servers import RunningServer


def test_failed_calls_are_counted_by_status_with_what_it_means(server: RunningServer, tmp_path: Path) -> None:
    done = run_loadtest([
        "--target", server.target, "--metrics", metrics_url(server), "--duration", "2s", "--users", "2",
        "--model", MODEL, "--out", str(tmp_path), "--loop", "open", "--rate", "20",
        "--deadline-share", "1", "--deadline-ms", "1",
    ])  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-2:]
    assert last[0].startswith("loadtest: exit status 1: ") and "call(s) failed:" in last[0]
    assert "DEADLINE_EXCEEDED: calls ran past their deadline" in last[1]


def test_a_run_that_cannot_start_says_so_in_one_line(server: RunningServer, tmp_path: Path) -> None:
    # The server holds several models and the run names none.
    done = run_loadtest(
        ["--target", server.target, "--no-reconcile", "--duration", "2s", "--out", str(tmp_path)]
    )
    assert done.returncode == 1
    assert "loadtest: cannot start: GetModel at " in done.stderr and "INVALID_ARGUMENT" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("loadtest: exit status 1: the run did not start")
