"""The machine a benchmark ran on, for the report's header."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psutil

from kit.launch import ROOT

PACKAGES = ("onnxruntime", "grpcio", "tokenizers", "numpy", "protobuf", "locust")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "-"


def git_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        return "-"
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    return done.stdout.strip() + (" (uncommitted changes)" if dirty.strip() else "")


def describe() -> dict[str, Any]:
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in PACKAGES},
        "commit": git_commit(),
    }


def one_line(machine: dict[str, Any]) -> str:
    load = ", ".join(str(x) for x in machine["load_average"])
    return (
        f"{machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB, {machine['os']}, "
        f"Python {machine['python']}, onnxruntime {machine['packages']['onnxruntime']}, "
        f"grpcio {machine['packages']['grpcio']}; load average at start {load}; commit {machine['commit']}"
    )
