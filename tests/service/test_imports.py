"""The serving package never imports torch (the serving image has none)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import attnserve.service as service

ROOT = Path(__file__).resolve().parents[2]


def test_importing_every_service_module_does_not_import_torch() -> None:
    modules = sorted(info.name for info in pkgutil.walk_packages(service.__path__, "attnserve.service."))
    assert (
        "attnserve.service.server" in modules
        and "attnserve.service.proto.attnserve.v1.attnserve_pb2" in modules
    )
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'onnx')\n"
        "             or m.startswith(('attnserve.training', 'attnserve.export')))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"service imports {result.stdout.strip()}"
