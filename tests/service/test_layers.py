"""The service's layers depend one way: transports on the call layer and the front ends, the
front ends on the engine, never back; the V2 data plane, the call layer and the engine know
no transport.

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
    "attnserve.service.grpc",
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
    # The V2 data plane: its gRPC adapter (servicer.py, wire.py) is the one exception below.
    "api/v2": (*TRANSPORTS, *OUTER),
    # The classify plane, as the V2 one: plain types, no transport.
    "api/classify": (*TRANSPORTS, *OUTER),
    # The HTTP adapters share the call layer with gRPC, never gRPC's own code.
    "api/http": ("grpc", "google.protobuf", "attnserve.service.proto", "attnserve.service.grpc", *OUTER),
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
        "attnserve.service.calls",
        "attnserve.service.server",
        "onnxruntime",
    ),
}

# The gRPC adapter of the V2 data plane lives beside it.
EXEMPT = {"api/v2/servicer.py", "api/v2/wire.py"}
# The client reads attention arrays with the server's own numpy helpers (per-token importance).
ALLOWED = {"client": ("attnserve.service.engine.request.attention",)}
# The OpenAPI document describes V2 REST bodies from the protocol's own descriptors (it reads
# them; no reply is built from a message).
ALLOWED_IN = {"api/http/openapi.py": ("google.protobuf.descriptor", "attnserve.service.proto.inference")}


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
    return sorted(path for path in target.rglob("*.py") if str(path.relative_to(SERVICE)) not in EXEMPT)


def violations(layer: str) -> list[str]:
    found = []
    for path in modules_of(layer):
        allowed = (*ALLOWED.get(layer, ()), *ALLOWED_IN.get(str(path.relative_to(SERVICE)), ()))
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


def test_the_exemptions_exist() -> None:
    for name in (*EXEMPT, *ALLOWED_IN):
        assert (SERVICE / name).is_file(), name


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    import grpc\n    from attnserve.service.api import native\n")
    assert imported_modules(module) == {"grpc", "attnserve.service.api"}
