"""The serving wheel holds only what serves, installs without extras, and serves.

Built the way the serving image builds it (`ATTNSERVE_WHEEL=serve pip wheel .`), installed
into a fresh venv (dependencies from the package index, through pip's cache), then started
on a repository of bundles this session trained and exported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from attnserve.service.client import Client
from tests.support.http import call
from tests.support.process import ServerProcess
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def serving_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        env={**os.environ, "ATTNSERVE_WHEEL": "serve"},
        timeout=300,
    )
    (wheel,) = out.glob("attnserve-*.whl")
    return wheel


def test_the_serving_wheel_holds_the_service_only(serving_wheel: Path) -> None:
    names = zipfile.ZipFile(serving_wheel).namelist()
    packages = {name.split("/")[1] for name in names if name.startswith("attnserve/")}
    assert packages == {"service"}, packages
    assert "attnserve/__init__.py" not in names  # a namespace: other attnserve wheels can share it
    assert "attnserve/service/proto/inference/grpc_service_pb2.py" in names
    assert "attnserve/service/bundle/reader.py" in names
    for static in ("index.html", "render.js", "explorer.js", "explorer.css", "docs.html", "docs.js"):
        assert f"attnserve/service/api/http/static/{static}" in names, static  # the explorer ships
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    scripts = zipfile.ZipFile(serving_wheel).read(entry_points).decode()
    assert "attnserve-serve" in scripts and "attnserve-client" in scripts
    assert "attnserve-train" not in scripts and "attnserve-export" not in scripts


def test_the_serving_wheel_installs_without_extras_and_serves(
    serving_wheel: Path, model_repository: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(serving_wheel)],
        check=True,
        timeout=600,
    )
    probe = subprocess.run(
        [
            python,
            "-c",
            "import sys, attnserve.service.server, attnserve.service.client;"
            "import importlib.util as u;"
            "print(u.find_spec('torch') is None, u.find_spec('attnserve.training') is None)",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
        timeout=120,
    )
    assert probe.stdout.split() == ["True", "True"], probe.stdout
    http_port = free_port()
    with (
        ServerProcess(model_repository, "--http-port", str(http_port), python=python, cwd=tmp_path) as server,
        Client(server.target) as client,
    ):
        reply = client.classify(["the white car is left of the black car"], model="car")
        assert reply.results[0].label in ("positive", "negative")
        assert reply.model == "car" and reply.version == 1
        page = call(http_port, "GET", "/")  # the explorer, served from the installed wheel
        assert page.status == 200 and b"/static/explorer.js" in page.body
        assert call(http_port, "GET", "/static/explorer.js").status == 200
