"""The tools beyond this environment: NVIDIA's perf_analyzer (V2 from its C++ client, run by
tools/perf-analyzer.sh), and MLServer and PyTriton serving the bundle from their own environments
(systems/). A run that lacks one stops before it measures, naming each and its install command."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench.sections import Refused
from kit.launch import ROOT, Launched, launched, v2_ready
from kit.perf_analyzer import PERF_ANALYZER
from kit.ports import free_port

INSTALL = {
    "perf_analyzer": "bash tools/triton-env.sh",
    "PyTriton": "bash bench/serving/systems/pytriton-env.sh",
    "MLServer": "bash bench/serving/systems/mlserver-env.sh",
}
SYSTEMS = Path(__file__).resolve().parent / "systems"
VENVS = {"PyTriton": ("ATTNSERVE_PYTRITON_VENV", ".venv-pytriton"),
         "MLServer": ("ATTNSERVE_MLSERVER_VENV", ".venv-mlserver")}  # fmt: skip


class Unavailable(Exception):
    """A tool cannot run here; the message says why."""


def venv_python(tool: str, must_exist: bool = True) -> Path:
    """The python of PyTriton's or MLServer's own environment."""
    variable, default = VENVS[tool]
    venv = Path(os.environ.get(variable, ROOT / default))
    if must_exist and not (venv / "bin" / "python").is_file():
        raise Unavailable(f"no {tool} environment at {venv}: create it with `{INSTALL[tool]}`")
    return venv / "bin" / "python"


def mlserver_env(create: bool) -> Path:
    """MLServer's python, checked (with `create`, made when missing) by mlserver-env.sh."""
    python = venv_python("MLServer", must_exist=not create)
    script = ROOT / INSTALL["MLServer"].split()[-1]
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise Unavailable(f"mlserver-env.sh failed: {(done.stdout + done.stderr).strip()[-800:]}")
    return python


def problem(tool: str) -> str | None:
    """None when `tool` (a key of INSTALL) can run here, else why it cannot."""
    if tool == "perf_analyzer":
        command = ["bash", str(PERF_ANALYZER), "--locate"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        return None if done.returncode == 0 else f"perf_analyzer is not usable ({done.stderr.strip()})"
    try:
        venv_python(tool) if tool == "PyTriton" else mlserver_env(create=False)
    except Unavailable as exc:
        return str(exc)
    return None


def missing(needed: dict[str, bool]) -> dict[str, str]:
    """Each tool `needed` that cannot run here -> why."""
    return {tool: why for tool, need in needed.items() if need and (why := problem(tool)) is not None}


def refuse(found: dict[str, str], leave_out: str) -> Refused:
    """One refusal for every missing tool: what, why, how to install it, or what to leave out."""
    lines = [f"missing {', '.join(found)}; nothing was measured"]
    lines += [f"  {tool}: {why}\n    install: {INSTALL[tool]}" for tool, why in found.items()]
    return Refused("\n".join([*lines, f"  or {leave_out}"]))


@contextlib.contextmanager
def mlserver(python: Path, bundle: Path, model: str) -> Iterator[Launched]:
    """MLServer with the bundle as `model`, one worker; adaptive batching up to 32 texts or 1 ms."""
    with tempfile.TemporaryDirectory(prefix="attnserve-mlserver-", ignore_cleanup_errors=True) as name:
        folder, grpc_port = Path(name), free_port()
        settings = {"debug": False, "host": "127.0.0.1", "grpc_port": grpc_port, "http_port": free_port(),
                    "metrics_port": free_port(), "parallel_workers": 1}  # fmt: skip
        (folder / "settings.json").write_text(json.dumps(settings))
        model_dir = folder / model
        model_dir.mkdir()
        shutil.copy(SYSTEMS / "mlserver_runtime.py", model_dir)
        parameters = {"uri": str(bundle.resolve()), "extra": {"intra_op_threads": 1}}
        runtime = "mlserver_runtime.AttnOnnxRuntime"
        model_settings = {"name": model, "implementation": runtime, "max_batch_size": 32,
                          "max_batch_time": 0.001, "parameters": parameters}  # fmt: skip
        (model_dir / "model-settings.json").write_text(json.dumps(model_settings))
        command = [str(python.absolute().parent / "mlserver"), "start", str(folder)]
        with launched(
            command, f"127.0.0.1:{grpc_port}", lambda target: v2_ready(target, model), "MLServer",
            log=folder / "mlserver.log", env={"PYTHONPATH": str(model_dir)}, cwd=folder,
        ) as server:  # fmt: skip
            yield server


def pytriton_server(bundle: Path, model: str, log: Path) -> contextlib.AbstractContextManager[Launched]:
    """Triton serving the bundle as `model` (TEXT) and `model`_ids (INPUT_IDS)."""
    python = venv_python("PyTriton")
    grpc_port, http_port, metrics_port = free_port(), free_port(), free_port()
    # Triton's Python-backend stub needs the libpython of the environment's own interpreter: else it
    # loads the system's 3.11.2 beside the venv's 3.11.7 library and fails in multiprocessing.
    libdir = "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"
    done = subprocess.run([str(python), "-c", libdir], capture_output=True, text=True, check=True)
    paths = ":".join([done.stdout.strip(), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])])
    command = [
        str(python), str(SYSTEMS / "pytriton_server.py"), "--bundle", str(bundle), "--model", model,
        "--grpc-port", str(grpc_port), "--http-port", str(http_port), "--metrics-port", str(metrics_port),
    ]  # fmt: skip
    return launched(command, f"127.0.0.1:{grpc_port}", lambda target: v2_ready(target, f"{model}_ids"),
                    "PyTriton", log=log, env={"LD_LIBRARY_PATH": paths}, timeout=300)  # fmt: skip
