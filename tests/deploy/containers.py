"""A container engine driven from the tests: docker when its daemon answers, else podman with the
sandbox settings of deploy/podman (the same choice and settings as deploy/images.sh).

Every call is bounded in time; a container started here is removed by whoever started it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PODMAN_CONF = REPO / "deploy" / "podman"
IMAGES_SH = REPO / "deploy" / "images.sh"


class EngineError(RuntimeError):
    pass


@dataclass(frozen=True)
class Engine:
    name: str  # docker | podman
    binary: str
    env: Mapping[str, str] = field(repr=False)  # the caller's environment plus the engine's settings

    def run(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run(
                [self.binary, *args], env=dict(self.env), capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired as exc:
            raise EngineError(f"{self.name} {' '.join(args)}: no answer within {timeout:.0f} s") from exc
        if check and done.returncode != 0:
            raise EngineError(f"{self.name} {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
        return done

    def inspect(self, kind: str, name: str) -> dict[str, Any]:
        found: list[dict[str, Any]] = json.loads(self.run(kind, "inspect", name).stdout)
        return found[0]

    def image_size(self, image: str) -> int:
        return int(self.inspect("image", image)["Size"])

    def health(self, container: str) -> str:
        """Run the container's HEALTHCHECK once and return the status it leaves. podman runs
        health checks from systemd timers, which a sandbox lacks, so the test runs them;
        docker runs them itself."""
        if self.name == "podman":
            self.run("healthcheck", "run", container, timeout=60, check=False)
        state = self.inspect("container", container)["State"]
        health = state.get("Health") or state.get("Healthcheck") or {}
        return str(health.get("Status", "none"))

    def wait_healthy(self, container: str, timeout: float, interval: float = 1.0) -> str:
        deadline = time.monotonic() + timeout
        status = "none"
        while time.monotonic() < deadline:
            status = self.health(container)
            if status == "healthy":
                return status
            if not self.inspect("container", container)["State"]["Running"]:
                break
            time.sleep(interval)
        return status

    def logs(self, container: str) -> str:
        done = self.run("logs", container, check=False, timeout=60)
        return done.stdout + done.stderr

    def remove(self, container: str) -> None:
        wait = ["--time", "5"] if self.name == "podman" else []  # docker rm -f kills at once
        self.run("rm", "--force", *wait, container, check=False, timeout=90)


def _settings(name: str) -> dict[str, str]:
    env = dict(os.environ)
    if name == "podman":
        env.setdefault("CONTAINERS_CONF", str(PODMAN_CONF / "containers.conf"))
        if os.geteuid() == 0:
            env.setdefault("CONTAINERS_STORAGE_CONF", str(PODMAN_CONF / "storage.conf"))
    env["ATTNSERVE_ENGINE"] = name
    return env


def _tiny_rootfs(root: Path) -> Path:
    """A root filesystem holding only /bin/true and the libraries it links: enough to start a
    real container before any image exists."""
    true = Path(shutil.which("true") or "/bin/true").resolve()
    linked = subprocess.run(["ldd", str(true)], capture_output=True, text=True, timeout=30).stdout
    files = [true] + [Path(word) for word in linked.split() if word.startswith("/")]
    for source in files:
        target = root / source.relative_to("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source.resolve(), target)
    return root / true.relative_to("/")


def find_engine(scratch: Path) -> Engine | str:
    """A container engine that can start containers, or why there is none."""
    docker = shutil.which("docker")
    if docker:
        engine = Engine("docker", docker, _settings("docker"))
        if engine.run("info", check=False, timeout=30).returncode == 0:
            return engine
    podman = shutil.which("podman")
    if podman is None:
        return "no container engine: podman is not installed and no Docker daemon answers"
    engine = Engine("podman", podman, _settings("podman"))
    info = engine.run("info", check=False, timeout=60)
    if info.returncode != 0:
        return f"podman does not work here: {info.stderr.strip()[-600:]}"
    # A real container (namespaces, cgroups, the OCI runtime) before any image is built.
    true = _tiny_rootfs(scratch / "rootfs")
    probe = engine.run(
        "run",
        "--rm",
        "--network",
        "none",
        "--rootfs",
        str(scratch / "rootfs"),
        "/" + str(true.relative_to(scratch / "rootfs")),
        check=False,
        timeout=120,
    )
    if probe.returncode != 0:
        return f"podman cannot start a container here: {probe.stderr.strip()[-600:]}"
    return engine


def build_images(engine: Engine, targets: Sequence[str], log: Path, timeout: float) -> float:
    """deploy/images.sh for `targets`, its output in `log`; returns the seconds it took."""
    start = time.monotonic()
    with log.open("w") as out:
        try:
            done = subprocess.run(
                ["bash", str(IMAGES_SH), *targets],
                env=dict(engine.env),
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raise EngineError(f"deploy/images.sh took over {timeout:.0f} s; see {log}") from exc
    if done.returncode != 0:
        raise EngineError(f"deploy/images.sh {' '.join(targets)} failed:\n{log.read_text()[-4000:]}")
    return time.monotonic() - start


def image_name(engine: Engine, which: str) -> str:
    done = subprocess.run(
        ["bash", str(IMAGES_SH), "--print", which],
        env=dict(engine.env),
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    return done.stdout.strip()
