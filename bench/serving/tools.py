"""The tools a serving benchmark needs beyond this environment, checked before it measures
anything: perf_analyzer (.venv-tools), PyTriton (.venv-pytriton) and MLServer (.venv-mlserver).
A run that lacks one stops at once with one message naming every missing tool and the command
that installs it, instead of starting servers and failing at each point."""

from __future__ import annotations

from collections.abc import Iterable

from bench.serving import perf_analyzer
from bench.serving.systems.mlserver import Unavailable, mlserver_env
from bench.serving.systems.pytriton_env import pytriton_python

INSTALL = {
    "perf_analyzer": "bash tools/triton-env.sh",
    "PyTriton": "bash bench/serving/systems/pytriton-env.sh",
    "MLServer": "bash bench/serving/systems/mlserver-env.sh",
}


def problem(tool: str) -> str | None:
    """None when `tool` (a key of INSTALL) can run here, else why it cannot."""
    if tool == "perf_analyzer":
        return perf_analyzer.locate()
    try:
        pytriton_python() if tool == "PyTriton" else mlserver_env(create=False)
    except Unavailable as exc:
        return str(exc)
    return None


def missing(tools: Iterable[str]) -> dict[str, str]:
    """Each of `tools` that cannot run here -> why."""
    return {tool: why for tool in tools if (why := problem(tool)) is not None}


def message(found: dict[str, str], leave_out: str) -> str:
    """One message for every missing tool: what, why, how to install it, or what to leave out."""
    lines = [f"bench: missing {', '.join(found)}; nothing was measured"]
    lines += [f"  {tool}: {why}\n    install: {INSTALL[tool]}" for tool, why in found.items()]
    return "\n".join([*lines, f"  or {leave_out}"])
