"""The service's layers depend one way: front ends (api/, grpc/) on the engine, never back.

Read from the source with `ast`, so an import inside a function counts as much as one at the
top of a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVICE = Path(__file__).resolve().parents[2] / "service"

# What each inner layer must never import (module prefixes).
FORBIDDEN = {
    "engine": (
        "grpc",
        "grpc_health",
        "grpc_reflection",
        "google.protobuf",
        "attnserve.service.proto",
        "attnserve.service.api",
        "attnserve.service.grpc",
        "attnserve.service.client",
        "attnserve.service.server",
        "attnserve.service.workers",
        "attnserve.export",
        "attnserve.training",
    ),
    "bundle": (
        "grpc",
        "onnxruntime",
        "tokenizers",
        "attnserve.service.engine",
        "attnserve.service.api",
        "attnserve.service.grpc",
        "attnserve.export",
        "attnserve.training",
        "torch",
    ),
    "client": (
        "attnserve.service.engine",
        "attnserve.service.api",
        "attnserve.service.grpc",
        "attnserve.service.server",
        "onnxruntime",
    ),
}


# The client reads attention arrays with the server's own numpy helpers (per-token importance).
ALLOWED = {"client": ("attnserve.service.engine.attention",)}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def violations(layer: str) -> list[str]:
    found = []
    for path in sorted((SERVICE / layer).rglob("*.py")):
        for module in sorted(imported_modules(path)):
            if module in ALLOWED.get(layer, ()):
                continue
            if any(module == bad or module.startswith(bad + ".") for bad in FORBIDDEN[layer]):
                found.append(f"{path.relative_to(SERVICE)} imports {module}")
    return found


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_only_what_it_may(layer: str) -> None:
    assert (SERVICE / layer).is_dir()
    assert violations(layer) == []


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    import grpc\n    from attnserve.service.api import native\n")
    assert imported_modules(module) == {"grpc", "attnserve.service.api"}
