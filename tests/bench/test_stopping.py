"""How a bench run ends early: a missing tool stops it before anything starts, with one message
naming it and its install command; SIGTERM or Ctrl-C stops every server it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from bench.cli import main
from kit.launch import health_serving
from tests.bench.conftest import MODEL
from tests.support.waits import eventually

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """perf_analyzer, PyTriton and MLServer pointed at environments that do not exist."""
    for name in ("ATTNSERVE_TOOLS_VENV", "ATTNSERVE_PYTRITON_VENV", "ATTNSERVE_MLSERVER_VENV"):
        monkeypatch.setenv(name, str(tmp_path / "absent" / name.lower()))


@pytest.mark.usefixtures("no_tools")
def test_peers_names_every_missing_tool_before_it_measures(
    bench_repository: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["peers", "--repository", str(bench_repository), "--model", MODEL, "--out", str(out),
            "--systems", "floor,pytriton,mlserver,native-w1", "--workloads", "text16"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("bench: missing perf_analyzer, PyTriton, MLServer; nothing was measured")
    for install in ("bash tools/triton-env.sh", "bash bench/serving/systems/pytriton-env.sh",
                    "bash bench/serving/systems/mlserver-env.sh"):  # fmt: skip
        assert f"install: {install}" in err
    assert not out.exists()  # no folder, no server, no point


@pytest.mark.usefixtures("no_tools")
def test_the_strict_suite_names_a_missing_perf_analyzer_before_it_measures(
    bench_repository: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["--tiny", "--repository", str(bench_repository), "--model", MODEL, "--out", str(out),
            "--sections", "ceiling,v2", "--strict"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "bench: missing perf_analyzer" in err and "install: bash tools/triton-env.sh" in err
    assert not out.exists()


def _serving(bench: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The bench's descendants once an attnserve it started answers health checks; else []."""
    tree: list[psutil.Process] = psutil.Process(bench.pid).children(recursive=True)
    for process in tree:
        try:
            command = process.cmdline()
        except psutil.NoSuchProcess:
            continue
        if "attnserve.service.cli" in command:
            port = command[command.index("--port") + 1]
            if health_serving(f"127.0.0.1:{port}", timeout=0.5):
                return tree
    return []


def _alive(process: psutil.Process) -> bool:
    try:
        status: str = process.status()
    except psutil.NoSuchProcess:
        return False
    return bool(status != psutil.STATUS_ZOMBIE)


@pytest.mark.slow  # an attnserve start, under a bench started as its own process
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_every_server_the_bench_started(
    bench_repository: Path, tmp_path: Path, signum: int, status: int
) -> None:
    # --seconds 60: the load would run for minutes, so only the signal can end this run.
    command = [sys.executable, "-m", "bench", "peers", "--repository", str(bench_repository),
               "--model", MODEL, "--out", str(tmp_path / "run"), "--systems", "native-w1",
               "--workloads", "text16", "--modes", "unary", "--levels", "1", "--seconds", "60"]  # fmt: skip
    log = tmp_path / "bench.log"
    with log.open("wb") as sink:
        # SIGINT as a terminal delivers it, even when this test runs in a background job (which ignores it).
        bench = subprocess.Popen(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    tree: list[psutil.Process] = []

    def serving() -> bool:
        tree[:] = _serving(bench)
        return bool(tree)

    try:
        assert eventually(serving, timeout=120, interval=0.2), log.read_text()
        os.kill(bench.pid, signum)
        assert bench.wait(60) == status, log.read_text()
        assert "the servers it started are stopped" in log.read_text()
        assert eventually(lambda: not any(_alive(process) for process in tree), 10)
    finally:
        if bench.poll() is None:
            bench.kill()
        for process in tree:
            if process.is_running():
                process.kill()
