"""Every `python -m bench ...` command the docs quote still runs: its subcommand path (the
section, `list`, or the suite) answers `--help` with exit status 0. A module form such as
`python -m bench.peers` names a module that must exist. Fast: no server, nothing measured."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pytest

from bench.cli import main

ROOT = Path(__file__).resolve().parents[2]
# `python -m bench` or `python -m bench.module`, then the first word after it when it is not a flag.
_COMMAND = re.compile(r"python -m (bench(?:\.[\w.]+)?)\b(?:[ \t]+([A-Za-z][\w-]*))?")


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _paths() -> dict[tuple[str, ...], str]:
    """Each distinct subcommand path -> the first place that quotes it."""
    found: dict[tuple[str, ...], str] = {}
    for document in _documents():
        for number, line in enumerate(document.read_text().splitlines(), 1):
            for match in _COMMAND.finditer(line):
                module, word = match.groups()
                path = (module,) if module != "bench" else ("bench", *([word] if word else []))
                found.setdefault(path, f"{document.relative_to(ROOT)}:{number}")
    return found


PATHS = _paths()


def test_the_docs_quote_bench_commands() -> None:
    assert ("bench",) in PATHS and ("bench", "peers") in PATHS


@pytest.mark.parametrize("path", sorted(PATHS), ids=" ".join)
def test_a_quoted_bench_command_answers_help(path: tuple[str, ...]) -> None:
    where = PATHS[path]
    if path[0] != "bench":
        assert importlib.util.find_spec(path[0]) is not None, f"{where}: no module {path[0]}"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main([*path[1:], "--help"]) if path[0] == "bench" else _module_help(path[0])
        except SystemExit as exit_info:
            status = exit_info.code if isinstance(exit_info.code, int) else 1
    assert status == 0, f"{where}: `python -m {' '.join(path)} --help` exited {status}: {err.getvalue()}"
    assert out.getvalue().strip(), f"{where}: `python -m {' '.join(path)} --help` printed nothing"


def _module_help(module: str) -> int:
    loaded = importlib.import_module(module)
    status: int = loaded.main(["--help"])
    return status
