"""MLServer serving the same bundle, for the comparison: its own environment, our custom runtime.

`mlserver_env()` finds (or, when allowed, creates with mlserver-env.sh) .venv-mlserver;
`mlserver(...)` writes a model repository for MLServer in a temporary folder (settings.json,
model-settings.json with adaptive batching on, the runtime module) and starts
`mlserver start` on free 127.0.0.1 ports. It is driven over V2 ModelInfer with TEXT inputs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from kit.launch import ROOT, Launched, launched, v2_ready
from kit.ports import free_port

HERE = Path(__file__).resolve().parent
ENV_SCRIPT = HERE / "mlserver-env.sh"
RUNTIME = HERE / "mlserver_runtime.py"


class Unavailable(Exception):
    """MLServer cannot be run here; the message says why."""


def mlserver_env(create: bool) -> Path:
    """The python of MLServer's environment; with `create`, make it when missing."""
    venv = Path(os.environ.get("ATTNSERVE_MLSERVER_VENV", ROOT / ".venv-mlserver"))
    python = venv / "bin" / "python"
    if not python.is_file() and not create:
        raise Unavailable(
            f"no MLServer environment at {venv}: create it with `bash {ENV_SCRIPT.relative_to(ROOT)}`"
        )
    done = subprocess.run(["bash", str(ENV_SCRIPT)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise Unavailable(f"mlserver-env.sh failed: {(done.stdout + done.stderr).strip()[-800:]}")
    return python


@contextlib.contextmanager
def mlserver(python: Path, bundle: Path, model: str) -> Iterator[Launched]:
    """MLServer with the bundle as `model`, one worker; adaptive batching up to 32 texts or 1 ms."""
    folder = Path(tempfile.mkdtemp(prefix="attnserve-mlserver-"))
    try:
        grpc_port = free_port()
        settings = {
            "debug": False, "host": "127.0.0.1", "grpc_port": grpc_port, "http_port": free_port(),
            "metrics_port": free_port(), "parallel_workers": 1,
        }  # fmt: skip
        (folder / "settings.json").write_text(json.dumps(settings))
        model_dir = folder / model
        model_dir.mkdir()
        shutil.copy(RUNTIME, model_dir / RUNTIME.name)
        model_settings = {
            "name": model,
            "implementation": "mlserver_runtime.AttnOnnxRuntime",
            "max_batch_size": 32,
            "max_batch_time": 0.001,
            "parameters": {"uri": str(bundle.resolve()), "extra": {"intra_op_threads": 1}},
        }
        (model_dir / "model-settings.json").write_text(json.dumps(model_settings))
        command = [str(python.absolute().parent / "mlserver"), "start", str(folder)]
        with launched(
            command, f"127.0.0.1:{grpc_port}", lambda target: v2_ready(target, model), "MLServer",
            log=folder / "mlserver.log", env={"PYTHONPATH": str(model_dir)}, cwd=folder,
        ) as server:  # fmt: skip
            yield server
    finally:
        shutil.rmtree(folder, ignore_errors=True)
