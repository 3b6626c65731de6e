"""docker-compose's `loadtest` service command, run as written against a real server.

The command is read from docker-compose.yml with its defaults resolved; only what Docker
would provide differs: the server's addresses (127.0.0.1 and free ports instead of the
`server` service), the reports folder, and a run time of a few seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.deploy.compose import load_compose
from tests.loadtest.conftest import REPO, metrics_url, read_json
from tests.support.servers import RunningServer


def test_the_compose_load_profile_command_runs_and_reconciles(server: RunningServer, tmp_path: Path) -> None:
    env = {"LOADTEST_TARGET": server.target, "LOADTEST_USERS": "3", "LOADTEST_SPAWN_RATE": "3",
           "LOADTEST_RUN_TIME": "3s"}  # fmt: skip
    command = load_compose(env)["services"]["loadtest"]["command"]
    assert command[0] == "locust"
    metrics = metrics_url(server)
    args = [{"server:9100": metrics}.get(arg, arg.replace("/reports", str(tmp_path))) for arg in command[1:]]
    assert metrics in args, "the compose command no longer reconciles against the servers' metrics"
    done = subprocess.run([sys.executable, "-m", "locust", *args, "--model", "car", "--only-summary"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "attnserve_stats.csv").is_file() and (tmp_path / "attnserve.html").is_file()
    reconciliation = read_json(tmp_path / "attnserve_reconciliation.json")
    assert reconciliation["matched"] is True, reconciliation["problems"]
