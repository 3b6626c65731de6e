"""`python -m loadtest` against a real server: reports written, every call accounted for.

Each run is bounded (a few seconds, a handful of users, 127.0.0.1 only). The checks are on
counts, never on speed.
"""

from __future__ import annotations

import csv
from pathlib import Path

from tests.loadtest.conftest import MODEL, metrics_url, read_json, run_loadtest
from tests.support.servers import RunningServer, make_settings

REPORTS = ("attnserve_stats.csv", "attnserve_failures.csv", "attnserve_stats_history.csv", "attnserve.html")


def stats_rows(out: Path) -> list[dict[str, str]]:
    with (out / "attnserve_stats.csv").open(newline="") as handle:
        return [row for row in csv.DictReader(handle) if row["Name"] != "Aggregated"]


def test_closed_loop_mix_reconciles_with_the_servers_counters(server: RunningServer, tmp_path: Path) -> None:
    done = run_loadtest([
        "--target", server.target, "--metrics", metrics_url(server), "--duration", "3s", "--users", "4",
        "--model", MODEL, "--out", str(tmp_path), "--bad-share", "0.2", "--attention-share", "0.5",
        "--batch-share", "0.3", "--deadline-share", "0.2", "--deadline-ms", "5000", "--seed", "7",
    ])  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name in REPORTS:
        assert (tmp_path / name).stat().st_size > 0, name
    assert "<html" in (tmp_path / "attnserve.html").read_text()[:2000].lower()

    reconciliation = read_json(tmp_path / "attnserve_reconciliation.json")
    assert reconciliation["matched"] is True, reconciliation["problems"]
    assert reconciliation["unresolved"] == {"native": 0, "v2": 0}
    for api in ("native", "v2"):
        totals = reconciliation["totals"][api]
        assert totals["client"] == totals["server"] > 0
    assert "MATCHED" in (tmp_path / "attnserve_reconciliation.md").read_text()

    ledger = read_json(tmp_path / "attnserve_ledger.json")
    assert ledger["wrong_status"] == [] and ledger["bad_replies"] == []
    assert ledger["abandoned"] == {}
    expected = {(e["api"], e["code"]) for e in ledger["expected_errors"]}
    assert {("native", "INVALID_ARGUMENT"), ("v2", "INVALID_ARGUMENT")} <= expected
    # Expected errors are successes in Locust's statistics, listed apart from valid calls.
    rows = stats_rows(tmp_path)
    kinds = {row["Type"] for row in rows}
    assert {"native", "v2", "native expected-error", "v2 expected-error"} <= kinds
    assert all(int(row["Failure Count"]) == 0 for row in rows)
    names = {row["Name"] for row in rows}
    assert any(name.startswith("batch ") for name in names)
    assert any(name.endswith("+attention") for name in names)


def test_open_loop_sends_at_the_given_rate(server: RunningServer, tmp_path: Path) -> None:
    rate, seconds, users = 40, 3, 2
    done = run_loadtest([
        "--target", server.target, "--metrics", metrics_url(server), "--duration", f"{seconds}s",
        "--users", str(users), "--loop", "open", "--rate", str(rate), "--api", "native", "--model", MODEL,
        "--out", str(tmp_path),
    ])  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ledger = read_json(tmp_path / "attnserve_ledger.json")
    sent = ledger["sent"]["native"]
    # Arrivals follow the clock, not the replies: never more than the schedule allows.
    assert 0 < sent <= rate * (seconds + 1) + users
    assert "v2" not in ledger["sent"]
    assert read_json(tmp_path / "attnserve_reconciliation.json")["matched"] is True


def test_over_length_texts_are_expected_errors_when_the_server_rejects_them(
    model_repository: Path, tmp_path: Path
) -> None:
    with RunningServer(make_settings(model_repository, long_text="reject")) as strict:
        done = run_loadtest([
            "--target", strict.target, "--metrics", metrics_url(strict), "--duration", "2s", "--users", "2",
            "--model", MODEL, "--api", "native", "--lengths", "0,0,0,1", "--bad-share", "0",
            "--batch-share", "0", "--out", str(tmp_path),
        ])  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ledger = read_json(tmp_path / "attnserve_ledger.json")
    errors = ledger["expected_errors"]
    assert {e["code"] for e in errors} == {"INVALID_ARGUMENT"}
    assert {e["kind"] for e in errors} <= {"over", "over +attention"}
    assert sum(e["count"] for e in errors) == ledger["sent"]["native"] > 0


def test_counters_of_another_server_are_a_mismatch(
    server: RunningServer, model_repository: Path, tmp_path: Path
) -> None:
    """The check can fail: reconciled against a server that saw none of the calls."""
    with RunningServer(make_settings(model_repository)) as other:
        done = run_loadtest([
            "--target", server.target, "--metrics", metrics_url(other), "--duration", "2s", "--users", "2",
            "--model", MODEL, "--out", str(tmp_path), "--settle-timeout", "1", "--deadline-share", "0",
        ])  # fmt: skip
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-3000:]
    reconciliation = read_json(tmp_path / "attnserve_reconciliation.json")
    assert reconciliation["matched"] is False
    assert any("fewer" in problem for problem in reconciliation["problems"])
    assert "MISMATCH" in done.stdout
