"""Run docker-compose services as local processes: their own commands and environment, with
volumes mapped to folders and ports remapped, so the stack can be exercised without Docker."""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.deploy.compose import environment, volume_mounts
from tests.deploy.conftest import REPO, VENV_BIN
from tests.deploy.dockerfile import Stage, lineage, stages

# The documented ATTNSERVE_TRAIN_ARGS variable, set for a model that trains in a few seconds.
TINY_TRAINING = "--no-progress --epochs 2 --n-pairs 60 --n-layers 1 --d-model 16"


def image_stage(service: dict[str, Any]) -> Stage:
    """The Dockerfile stage a compose service's image is built from."""
    build = service["build"]
    found = stages(REPO / build.get("context", ".") / build["dockerfile"])
    target = build.get("target")
    stage = found[-1] if target is None else next(s for s in found if s.name == target)
    return lineage(found, stage)


def image_env(stage: Stage) -> dict[str, str]:
    """ENV of an image stage, minus values that refer to other variables (PATH=/opt/venv/bin:$PATH)."""
    env: dict[str, str] = {}
    for args in stage.all("ENV"):
        for item in shlex.split(args):
            key, _, value = item.partition("=")
            if "$" not in value:
                env[key] = value
    return env


def image_copies(stage: Stage) -> dict[str, Path]:
    """Container path -> repository path for each plain COPY of a file."""
    copies = {}
    for args in stage.all("COPY"):
        parts = [p for p in args.split() if not p.startswith(("--chmod=", "--chown="))]
        if any(p.startswith("--") for p in parts) or len(parts) != 2:
            continue  # --from=<stage> copies come from another stage, not the repository
        source, dest = parts
        if (REPO / source).is_file():
            copies[dest] = REPO / source
    return copies


@dataclass
class LocalService:
    """One compose service prepared to run here."""

    name: str
    command: list[str]
    env: dict[str, str]
    volumes: dict[str, Path] = field(default_factory=dict)  # container path -> local folder


def prepare(name: str, service: dict[str, Any], volume_root: Path, overrides: dict[str, str]) -> LocalService:
    stage = image_stage(service)
    volumes = {}
    for source, target, _ in volume_mounts(service):
        if "/" in source or source.startswith("."):
            raise ValueError(f"{name}: bind mount {source} is not rehearsed")
        volumes[target] = volume_root / source
        volumes[target].mkdir(parents=True, exist_ok=True)

    def local_path(value: str) -> str:
        for target, folder in volumes.items():
            if value == target or value.startswith(target + "/"):
                return str(folder) + value[len(target) :]
        return value

    env = {"PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin", "HOME": str(volume_root), "LANG": "C.UTF-8"}
    env.update({k: local_path(v) for k, v in image_env(stage).items()})
    env.update({k: local_path(v) for k, v in environment(service).items()})
    env.update(overrides)
    command = list(service["command"])
    copied = {
        dest: source
        for dest, source in image_copies(stage).items()
        if dest == command[0] or Path(dest).name == command[0]
    }
    program = next(iter(copied.values()), VENV_BIN / command[0])
    if not program.exists():
        raise FileNotFoundError(f"{name}: {command[0]} is neither copied into the image nor installed")
    # A script gets its mode from COPY --chmod in the image; a checkout may not carry it.
    command[0:1] = [str(program)] if os.access(program, os.X_OK) else ["sh", str(program)]
    return LocalService(name, command, env, volumes)


def healthcheck(
    service: dict[str, Any], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """The service's healthcheck command, run here; a program the image copies in (such as
    attnserve-healthcheck) runs from the repository, any other from the venv."""
    test = service["healthcheck"]["test"]
    if test[0] == "CMD-SHELL":
        command = ["sh", "-c", test[1]]
    else:
        copied = {Path(dest).name: source for dest, source in image_copies(image_stage(service)).items()}
        program = ["sh", str(copied[test[1]])] if test[1] in copied else [str(VENV_BIN / test[1])]
        command = [*program, *test[2:]]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


class PrometheusAPI:
    def __init__(self, base: str) -> None:
        self.base = base

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.base}{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
        with urllib.request.urlopen(url, timeout=5) as reply:
            body = json.loads(reply.read())
        if body.get("status") != "success":
            raise RuntimeError(f"{url}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.get("/api/v1/query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base}/-/ready", timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False


def finite_values(result: list[dict[str, Any]]) -> list[float]:
    return [v for v in (float(r["value"][1]) for r in result) if math.isfinite(v)]


def wait_until(predicate: Any, timeout: float, interval: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False
