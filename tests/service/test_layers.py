"""The service's layers depend one way: transports on the call layer and the planes, the
planes on the engine, never back; the planes, the call layer and the engine know no
transport, and the two transports (api/grpc/, api/http/) never import each other.

Read from the source with `ast`, so an import inside a function counts as much as one at the
top of a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVICE = Path(__file__).resolve().parents[2] / "service"

# Any transport: the wire libraries, the generated messages and the transport packages.
TRANSPORTS = (
    "grpc",
    "grpc_health",
    "grpc_reflection",
    "google.protobuf",
    "starlette",
    "uvicorn",
    "attnserve.service.proto",
    "attnserve.service.api.grpc",
    "attnserve.service.api.http",
)
OUTER = (
    "attnserve.service.server",
    "attnserve.service.workers",
    "attnserve.service.client",
    "attnserve.export",
    "attnserve.training",
)

# Edge parsing and the heap trim serve both transports: they know no transport and no engine.
SHARED_BY_TRANSPORTS = (
    *TRANSPORTS,
    *OUTER,
    "attnserve.service.engine",
    "attnserve.service.api",
    "attnserve.service.calls",
)

# What each layer (a folder or a module of service/) must never import (module prefixes).
FORBIDDEN = {
    "edges.py": SHARED_BY_TRANSPORTS,
    "allocator.py": SHARED_BY_TRANSPORTS,
    "engine": (*TRANSPORTS, *OUTER, "attnserve.service.api", "attnserve.service.calls"),
    "calls": (*TRANSPORTS, *OUTER, "attnserve.service.api"),
    # The planes: plain types, no transport.
    "api/v2": (*TRANSPORTS, *OUTER),
    "api/native": (*TRANSPORTS, *OUTER),
    # What the server and the client share: neither side.
    "common": (*SHARED_BY_TRANSPORTS, "attnserve.service.bundle", "attnserve.service.errors", "onnxruntime"),
    # The two transports mirror each other: each shares the call layer and the planes, never
    # the other's code (and HTTP no protobuf: its bodies are described from the planes' types).
    "api/http": ("grpc", "google.protobuf", "attnserve.service.proto", "attnserve.service.api.grpc", *OUTER),
    "api/grpc": ("starlette", "uvicorn", "attnserve.service.api.http", *OUTER),
    "bundle": (
        "grpc",
        "onnxruntime",
        "tokenizers",
        "attnserve.service.engine",
        "attnserve.service.api",
        "attnserve.service.api.grpc",
        "attnserve.export",
        "attnserve.training",
        "torch",
    ),
    "client": (
        "attnserve.service.engine",
        "attnserve.service.api",
        "attnserve.service.api.grpc",
        "attnserve.service.calls",
        "attnserve.service.server",
        "onnxruntime",
    ),
}

# The client reads attention arrays with the server's own numpy helpers (per-token importance).
ALLOWED = {"client": ("attnserve.service.engine.request.attention",)}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def modules_of(layer: str) -> list[Path]:
    target = SERVICE / layer
    if target.is_file():
        return [target]
    return sorted(target.rglob("*.py"))


def violations(layer: str) -> list[str]:
    found = []
    for path in modules_of(layer):
        allowed = ALLOWED.get(layer, ())
        for module in sorted(imported_modules(path)):
            if module in allowed:
                continue
            if any(module == bad or module.startswith(bad + ".") for bad in FORBIDDEN[layer]):
                found.append(f"{path.relative_to(SERVICE)} imports {module}")
    return found


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_only_what_it_may(layer: str) -> None:
    assert (SERVICE / layer).exists()
    assert modules_of(layer)
    assert violations(layer) == []


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    import grpc\n    from attnserve.service.api import native\n")
    assert imported_modules(module) == {"grpc", "attnserve.service.api"}
