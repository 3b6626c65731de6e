"""docker-compose.yml read the way Compose reads it: YAML plus `${VAR:-default}` interpolation."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"

# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}, ${NAME?message}, $NAME, and $$.
_TOKEN = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


class InterpolationError(ValueError):
    pass


def interpolate(value: str, env: Mapping[str, str]) -> str:
    def substitute(m: re.Match[str]) -> str:
        if m.group("escaped"):
            return "$"
        name = m.group("braced") or m.group("bare")
        op, arg = m.group("op"), m.group("arg")
        present = name in env and (env[name] != "" or op is None or not op.startswith(":"))
        if op is None:
            return env.get(name, "")
        if op.endswith("?"):
            if not present:
                raise InterpolationError(f"required variable {name} is missing: {arg}")
            return env[name]
        return env[name] if present else arg

    return _TOKEN.sub(substitute, value)


def variables_with_defaults(text: str) -> dict[str, str]:
    """Every `${NAME:-default}` of a compose file, as {NAME: default}."""
    found: dict[str, str] = {}
    for m in _TOKEN.finditer(text):
        if m.group("braced") and m.group("op") in (":-", "-"):
            found[m.group("braced")] = m.group("arg")
    return found


def _walk(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [_walk(item, env) for item in node]
    if isinstance(node, dict):
        return {key: _walk(value, env) for key, value in node.items()}
    return node


def load_compose(env: Mapping[str, str] | None = None, path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The compose file with variables resolved from `env` (defaults when `env` is empty)."""
    raw = yaml.safe_load(path.read_text())
    resolved: dict[str, Any] = _walk(raw, env or {})
    return resolved


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's `environment:` as a dict, whichever of the two Compose syntaxes it uses."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.split("=", 1) for item in env)
        return {k: v for k, v in pairs}
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def parse_duration(text: str) -> float:
    """Compose durations ("30s", "1m30s", "500ms", "2h") in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a compose duration: {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


def volume_mounts(service: Mapping[str, Any]) -> list[tuple[str, str, bool]]:
    """(source, container target, read_only) for each short-syntax volume entry."""
    mounts = []
    for entry in service.get("volumes", []):
        fields = entry.split(":")
        source, target = fields[0], fields[1]
        mounts.append((source, target, len(fields) > 2 and "ro" in fields[2].split(",")))
    return mounts
