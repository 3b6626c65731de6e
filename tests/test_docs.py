"""Every shell command of the README and docs/*.md runs as written from a clone after `make serve`.

The clone is a folder linking every tracked top-level entry of this checkout and its
`.venv`, with `runs/car-order` (a trained run), `models/car-order/1` exported from it and
the shipped `models/sst2-sentiment/2`, served the way `make serve` serves it
(`--default-model car-order`, the repository watched). Commands run with `bash -c` in
that folder, in document order, on a PATH without the venv's bin/ (a bare
`attnserve-client` or `python` would fail there, as it does for a reader without an
activated venv). What the test changes, and only that: the documented
ports of `make serve` (50051, 9100, HTTP 8000) become the test server's free ports, other documented
ports (a second server beside it) become other free ports, and a load test that names no
--metrics gets the test server's (its default, HOST:9100, is make serve's port).

Each command is classified by the first rule below that matches it:
- run: must exit 0 (the default);
- server: an `attnserve-serve` command; it must become SERVING, then stop with status 0 on SIGTERM;
- admin: run against a second server started with --admin (the docs say to start one);
- perf: perf_analyzer through tools/perf-analyzer.sh, with the Triton tools venv; exit 2
  with "Failed to obtain stable measurement" is accepted (docs/v2.md explains it);
- long: minutes or more (training, benchmarks, load tests, the suite itself): run only with
  ATTNSERVE_DOCS_LONG=1;
- skip: needs what a test cannot have here (Docker, a cluster, a deployment's secrets,
  root, the reader's own data); the reason is given per rule.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from attnserve.service.client import Client, ClientError
from tests.support.docs import DocCommand, documents, run_session, shell_commands, start_session, stop_session
from tests.support.process import ServerProcess
from tests.support.servers import free_port
from tests.support.shipped import shipped_sentiment

ROOT = Path(__file__).resolve().parents[1]
LONG = os.environ.get("ATTNSERVE_DOCS_LONG") == "1"
COMMAND_SECONDS = 240
DEPLOYMENT = "needs a deployment's certificates and tokens (tests/service/api/grpc/test_security.py)"

# (pattern, kind, reason); the first match wins.
RULES: list[tuple[str, str, str]] = [
    (r"\bdocker\b|\bkubectl\b|\bkustomize\b", "skip", "needs Docker or a Kubernetes cluster"),
    (r"dns:///attnserve", "skip", "needs a deployment whose replicas answer at the DNS name attnserve"),
    (r"/run/secrets|server\.example|--tls-cert tls\.crt", "skip", DEPLOYMENT),
    (r"reviews\.csv", "skip", "trains on the reader's own CSV file"),
    (r"ids\.json", "skip", "needs token ids made with the model's tokenizer in a JSON file"),
    (r"tools/triton-env\.sh", "skip", "installs Debian packages as root (make test-deps does it)"),
    (r"^make (test|check)$", "skip", "the test suite itself"),
    (r"^make serve$", "skip", "this test serves the clone with make serve's command line"),
    (
        r"^make proto$",
        "skip",
        "rewrites service/proto/ of the checkout (tests/service/test_proto.py: the same)",
    ),
    (r"^make (compare|model)$|attnserve-train (?!--help)", "long", "trains models"),
    (r"-m bench(?! [\w.]*--help)", "long", "benchmarks"),
    (r"-m loadtest (?!--help)", "long", "load tests run for their --duration"),
    (r"-m pytest|tests\.support\.load", "long", "the test suite"),
    (r"attnserve-serve (?!--help)", "server", ""),
    (r"attnserve-client (reload|unload)\b", "admin", ""),
    (r"perf-analyzer\.sh", "perf", ""),
]


@dataclass(frozen=True)
class Case:
    command: DocCommand
    kind: str
    reason: str


def classify(command: DocCommand) -> Case:
    for pattern, kind, reason in RULES:
        if re.search(pattern, command.text):
            return Case(command, kind, reason)
    return Case(command, "run", "")


CASES = [classify(c) for document in documents(ROOT) for c in shell_commands(ROOT, document)]


@dataclass
class Clone:
    path: Path
    server: ServerProcess
    env: dict[str, str]
    http_port: int = 0
    admin: ServerProcess | None = None


def _clean_path() -> str:
    """PATH without any folder holding our commands: a bare `attnserve-client` fails."""
    folders = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in folders if d and not Path(d, "attnserve-client").exists())


@pytest.fixture(scope="module")
def clone(model_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clone]:
    from attnserve.export.writer import export_run

    path = tmp_path_factory.mktemp("clone")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    for top in sorted({line.split("/")[0] for line in tracked.stdout.splitlines()} | {".venv"}):
        if top == "models":  # the shipped bundle: the clone's own repository is made below
            continue
        if (ROOT / top).exists():
            (path / top).symlink_to(ROOT / top)
    (path / "runs").mkdir()
    shutil.copytree(model_repository.parent / "runs" / "car", path / "runs" / "car-order")
    export_run(path / "runs" / "car-order", path / "models", "car-order")
    shipped_sentiment(path / "models")  # the README's second model, as shipped
    env = {**os.environ, "PATH": _clean_path()}
    http_port = free_port()
    with ServerProcess(
        Path("models"), "--default-model", "car-order", "--http-port", str(http_port), cwd=path
    ) as server:
        env["ATTNSERVE_TARGET"] = server.target
        state = Clone(path, server, env, http_port)
        try:
            yield state
        finally:
            if state.admin is not None:
                state.admin.__exit__(None, None, None)


def _ports(text: str, clone: Clone, server: ServerProcess | None) -> str:
    """make serve's documented ports -> `server`'s; any other documented port (all of them
    when `server` is None: a command that starts a server) -> a free one."""
    mapping = {} if server is None else {"50051": str(server.port), "9100": str(server.metrics_port)}
    if server is not None:
        mapping["8000"] = str(clone.http_port)  # make serve's HTTP port: the clone server's

    def port(match: re.Match[str]) -> str:
        number = match.group(2)
        if number not in mapping:
            mapping[number] = str(free_port())
        return match.group(1) + mapping[number]

    text = re.sub(r"(127\.0\.0\.1:|--port |--metrics-port |--http-port )(\d{4,5})\b", port, text)
    if "-m loadtest " in text and "--metrics" not in text and "--no-reconcile" not in text:
        text += f" --metrics 127.0.0.1:{clone.server.metrics_port}"
    return text


def _check(case: Case, code: int, output: str) -> None:
    where, tail = case.command.where, output[-3000:]
    if case.kind == "perf" and code == 2 and "Failed to obtain stable measurement" in output:
        return  # a measurement outcome on a busy machine (docs/v2.md), not a broken command
    assert code == 0, (
        f"{where}: `{case.command.text}` "
        + (f"ran past {COMMAND_SECONDS} s" if code == -1 else f"exited {code}")
        + f":\n{tail}"
    )
    assert "Traceback" not in output, f"{where}: traceback:\n{tail}"


def _serve(case: Case, clone: Clone) -> None:
    found = re.search(r"--port (\d+)", case.command.text)
    assert found is not None and found.group(1) != "50051", (
        f"{case.command.where}: serves on make serve's port 50051, which make serve holds"
    )
    text = _ports(case.command.text, clone, None)
    port = int(re.search(r"--port (\d+)", text).group(1))  # type: ignore[union-attr]
    with tempfile.TemporaryFile() as log:
        process = start_session(text, clone.path, clone.env, log)
        try:
            deadline = time.monotonic() + 120
            while process.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(ClientError), Client(f"127.0.0.1:{port}", timeout=2) as client:
                    if client.health() == "SERVING":
                        break
                time.sleep(0.2)
            serving = process.poll() is None and time.monotonic() < deadline
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)  # bash -c ran it in place (one simple command)
            try:
                code = process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                code = -1
        finally:
            stop_session(process)
        log.seek(0)
        output = log.read().decode(errors="replace")[-3000:]
    assert serving, f"{case.command.where}: not SERVING within 120 s:\n{output}"
    assert code == 0, f"{case.command.where}: exit status {code} after SIGTERM"


def _admin_server(clone: Clone) -> ServerProcess:
    if clone.admin is None:
        admin = ServerProcess(Path("models"), "--default-model", "car-order", "--admin", cwd=clone.path)
        clone.admin = admin.__enter__()
    return clone.admin


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[case.command.where for case in CASES])
def test_documented_command_runs(case: Case, clone: Clone) -> None:
    if case.kind == "skip":
        pytest.skip(case.reason)
    if case.kind == "long" and not LONG:
        pytest.skip(f"long ({case.reason}): set ATTNSERVE_DOCS_LONG=1 to run it")
    if case.kind == "server":
        _serve(case, clone)
        return
    env, server = dict(clone.env), clone.server
    if case.kind == "admin":
        server = _admin_server(clone)
        env["ATTNSERVE_TARGET"] = server.target
    if case.kind == "perf":
        tools = Path(os.environ.get("ATTNSERVE_TOOLS_VENV", ROOT / ".venv-tools"))
        if not (tools / "bin" / "python").exists():
            pytest.skip("needs the Triton client tools venv (make test-deps, or ATTNSERVE_TOOLS_VENV)")
        env["ATTNSERVE_TOOLS_VENV"] = str(tools)
    if (
        case.command.text.startswith("make ")
        and subprocess.run(["make", "-q", ".venv/bin/.installed"], cwd=clone.path, env=env).returncode != 0
    ):
        pytest.skip("the venv's install stamp is older than pyproject.toml: make would reinstall it")
    _check(case, *run_session(_ports(case.command.text, clone, server), clone.path, env, COMMAND_SECONDS))


def test_the_docs_have_commands_and_no_bare_ones() -> None:
    """A bare `attnserve-*`, `python` or `pytest` needs an activated venv; grpcurl is installed nowhere."""
    assert len(CASES) > 30
    bare = re.compile(r"(^|[|;&(]\s*|^\w+=\S+\s+)(attnserve-\w+|python3?|pytest|locust|grpcurl)\b")
    offenders = [case.command.where for case in CASES if bare.search(case.command.text)]
    assert offenders == []
    runnable = [case for case in CASES if case.kind in ("run", "server", "admin", "perf")]
    assert len(runnable) >= 15
