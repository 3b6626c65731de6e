"""The supervisor's merged /metrics under `--workers N` (`service/observe/merged.py`).

Real worker processes write prometheus_client's multiprocess files; the supervisor's metrics
server (`workers._start_metrics`, a real HTTP server on 127.0.0.1) sums them. A file a
worker created but had not sized yet (left for good when the worker is killed in that
moment) must not fail the scrape; a corrupt file must.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from attnserve.service.observe.merged import WorkerFiles
from attnserve.service.workers import _start_metrics
from tests.support.servers import plain_settings

WORKER = textwrap.dedent(
    """
    from prometheus_client import Counter, Histogram
    Counter("attnserve_test_calls_total", "calls", ["model"]).labels("car").inc(3)
    Histogram("attnserve_test_seconds", "seconds", buckets=(0.1, 1.0)).observe(0.5)
    """
)


def record(directory: Path, workers: int) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    for _ in range(workers):
        run = subprocess.run(
            [sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=60
        )
        assert run.returncode == 0, run.stderr


def scrape(port: int) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, sample.labels.get("le", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("attnserve_test_")
    }


def test_an_unsized_file_of_a_killed_worker_does_not_fail_the_scrape(tmp_path: Path) -> None:
    record(tmp_path, workers=2)
    # What a worker killed between creating its file and sizing it leaves behind, for good.
    (tmp_path / "counter_4194301.db").touch()
    (tmp_path / "histogram_4194301.db").touch()
    httpd = _start_metrics(plain_settings(metrics_port=0, metrics_host="127.0.0.1", workers=2), str(tmp_path))
    try:
        for _ in range(3):
            got = scrape(httpd.server_port)
            assert got[("attnserve_test_calls_total", "")] == 6
            assert got[("attnserve_test_seconds_bucket", "1.0")] == 2
            assert got[("attnserve_test_seconds_count", "")] == 2
    finally:
        httpd.shutdown()


def test_a_corrupt_file_fails_the_scrape_loudly(tmp_path: Path) -> None:
    record(tmp_path, workers=1)
    corrupt = bytearray((tmp_path / next(p.name for p in tmp_path.glob("counter_*.db"))).read_bytes())
    corrupt[0:4] = (10**6).to_bytes(4, "little")  # claims more bytes than its entries hold
    (tmp_path / "counter_4194302.db").write_bytes(bytes(corrupt))
    with pytest.raises((RuntimeError, ValueError)):
        WorkerFiles(str(tmp_path)).collect()
    httpd = _start_metrics(plain_settings(metrics_port=0, metrics_host="127.0.0.1", workers=2), str(tmp_path))
    try:
        with pytest.raises(urllib.error.HTTPError) as failed:
            scrape(httpd.server_port)
        assert failed.value.code == 500
    finally:
        httpd.shutdown()
