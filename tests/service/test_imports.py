"""The serving package never imports torch (the serving image has none)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import service

ROOT = Path(__file__).resolve().parents[2]


def test_importing_every_service_module_does_not_import_torch() -> None:
    modules = sorted(info.name for info in pkgutil.walk_packages(service.__path__, "service."))
    assert "service.server" in modules and "service.proto.attnserve.v1.attnserve_pb2" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'training', 'onnx'))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"service imports {result.stdout.strip()}"
