"""Who may import whom, read from the source: no module imports itself back through others
(at run time, under TYPE_CHECKING or inside a function alike), the client imports nothing of
the server, and service/common/ imports neither side."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("service", "training", "export")
CLIENT = "attnserve.service.client"
# What the client may import of attnserve: itself, the generated messages, and what both sides share.
CLIENT_MAY = (CLIENT, "attnserve.service.proto", "attnserve.service.common")


def module_name(path: Path) -> str:
    parts = ["attnserve", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(stages: tuple[str, ...] = STAGES) -> dict[str, Path]:
    found = {}
    for stage in stages:
        for path in (ROOT / stage).rglob("*.py"):
            if "proto" not in path.relative_to(ROOT / stage).parts[:1]:
                found[module_name(path)] = path
    return found


def imported(path: Path, name: str, known: frozenset[str] = frozenset()) -> Iterator[str]:
    """Every module name `path` imports, wherever the import statement stands. `from a import b`
    is an import of `a.b` when that is a module in `known`, else of `a`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield full if full in known else base


def graph(found: dict[str, Path]) -> dict[str, set[str]]:
    known = frozenset(found)
    return {
        name: {other for other in imported(path, name, known) if other in found and other != name}
        for name, path in found.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_type_checking_circle(tmp_path: Path) -> None:
    edges = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}}
    assert cycles(edges) == [["a.x", "a.y", "a.z"]]
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .n import N\n")
    assert set(imported(source, "pkg.m")) == {"typing", "pkg.n"}
    assert set(imported(source, "pkg.m", frozenset({"pkg.n.N"}))) == {"typing", "pkg.n.N"}


@pytest.mark.parametrize("stage", STAGES)
def test_no_module_imports_itself_back(stage: str) -> None:
    assert cycles(graph(modules((stage,)))) == []


def test_the_client_imports_nothing_of_the_server() -> None:
    found = modules(("service",))
    reached = {
        f"{name} imports {other}"
        for name, path in found.items()
        if name.startswith(CLIENT)
        for other in imported(path, name, frozenset(found))
        if other.startswith("attnserve.") and not other.startswith(CLIENT_MAY)
    }
    assert reached == set()


def test_what_both_sides_share_imports_neither() -> None:
    found = modules(("service",))
    reached = {
        f"{name} imports {other}"
        for name, path in found.items()
        if name.startswith("attnserve.service.common")
        for other in imported(path, name)
        if other.startswith("attnserve.") and not other.startswith("attnserve.service.common")
    }
    assert reached == set()
