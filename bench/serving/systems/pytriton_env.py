"""PyTriton for the peer comparison: its environment (.venv-pytriton, made by pytriton-env.sh
beside this file) and the server (pytriton_server.py, run inside it) on free 127.0.0.1 ports."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from bench.serving.systems.mlserver import Unavailable
from kit.launch import ROOT, Launched, launched, v2_ready
from kit.ports import free_port

SERVER = Path(__file__).resolve().parent / "pytriton_server.py"


def pytriton_python() -> Path:
    venv = Path(os.environ.get("ATTNSERVE_PYTRITON_VENV", ROOT / ".venv-pytriton"))
    python = venv / "bin" / "python"
    if not python.is_file():
        raise Unavailable(
            f"no PyTriton environment at {venv}: create it with `bash bench/serving/systems/pytriton-env.sh`"
        )
    return python


def loader_path(python: Path) -> dict[str, str]:
    """LD_LIBRARY_PATH for Triton's Python-backend stub: the libpython of the environment's own
    interpreter. Without it the stub loads the system's libpython 3.11.2 beside the 3.11.7
    standard library of the venv and fails in multiprocessing (RLock._recursion_count)."""
    done = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    paths = [done.stdout.strip(), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])]
    return {"LD_LIBRARY_PATH": ":".join(paths)}


@contextlib.contextmanager
def pytriton_server(python: Path, bundle: Path, model: str, log: Path) -> Iterator[Launched]:
    """Triton serving the bundle as `model` (TEXT) and `model`_ids (INPUT_IDS), ready on return."""
    grpc_port, http_port, metrics_port = free_port(), free_port(), free_port()
    command = [
        str(python), str(SERVER), "--bundle", str(bundle), "--model", model,
        "--grpc-port", str(grpc_port), "--http-port", str(http_port), "--metrics-port", str(metrics_port),
    ]  # fmt: skip
    with launched(
        command, f"127.0.0.1:{grpc_port}", lambda target: v2_ready(target, f"{model}_ids"), "PyTriton",
        log=log, env=loader_path(python), timeout=300,
    ) as server:  # fmt: skip
        yield server
