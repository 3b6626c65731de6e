"""Where PyTriton's environment is: .venv-pytriton (bench/pytriton-env.sh makes it)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from bench.mlserver import Unavailable

ROOT = Path(__file__).resolve().parent.parent


def pytriton_python() -> Path:
    venv = Path(os.environ.get("ATTNSERVE_PYTRITON_VENV", ROOT / ".venv-pytriton"))
    python = venv / "bin" / "python"
    if not python.is_file():
        raise Unavailable(f"no PyTriton environment at {venv}: create it with `bash bench/pytriton-env.sh`")
    return python


def loader_path(python: Path) -> dict[str, str]:
    """LD_LIBRARY_PATH for Triton's Python-backend stub: the libpython of the environment's own
    interpreter. Without it the stub loads the system's libpython 3.11.2 beside the 3.11.7
    standard library of the venv and fails in multiprocessing (RLock._recursion_count)."""
    done = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    paths = [done.stdout.strip(), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])]
    return {"LD_LIBRARY_PATH": ":".join(paths)}
