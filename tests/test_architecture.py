"""docs/architecture.md's package list names every module of the stages, and only modules
that exist.

The list is the text block under "## Packages". A line whose first word ends in `/` and that
is indented by 0, 2 or 4 spaces opens a folder: a stage at 0 (`service/`), a package of the
stage at 2 (`  engine/`), a package of that at 4 (`    request/`); the lines after it, up
to the next folder, are that folder's. A module is listed when its file name appears on its
folder's lines outside parentheses (the parentheses say what a module does, and may name
other files). `__init__.py` files and the generated `service/proto/` are not listed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
STAGES = ("service", "export", "training")
GENERATED = ("service/proto/",)
FOLDER_INDENTS = (0, 2, 4)
MODULE = re.compile(r"(?<![\w<>./-])(\w+\.py)\b")
PARENTHESES = re.compile(r"\([^()]*\)")


def package_block(text: str) -> list[str]:
    """The lines of the first code block after the "## Packages" heading."""
    after = re.split(r"^## Packages$", text, maxsplit=1, flags=re.MULTILINE)[1]
    start = after.index("```")
    body = after[after.index("\n", start) + 1 :]
    return body[: body.index("```")].splitlines()


def folder_texts(lines: list[str]) -> Iterator[tuple[str, str]]:
    """(folder path as written, e.g. "service/engine/request/", text of its lines) per folder."""
    path: list[str] = []
    texts: dict[str, list[str]] = {}
    current: str | None = None
    for line in lines:
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        first = stripped.split(" ", 1)[0]
        if first.endswith("/") and indent in FOLDER_INDENTS and indent // 2 <= len(path):
            path = [*path[: indent // 2], first]
            current = "".join(path)
            stripped = stripped[len(first) :]
        if current is not None:
            texts.setdefault(current, []).append(stripped)
    for folder, parts in texts.items():
        yield folder, " ".join(parts)


def listed_modules(text: str) -> set[str]:
    """Every module the package list names, as a path from the repository root."""
    listed: set[str] = set()
    for folder, words in folder_texts(package_block(text)):
        while PARENTHESES.search(words):  # innermost first: nested parentheses go too
            words = PARENTHESES.sub(" ", words)
        listed.update(folder + name for name in MODULE.findall(words))
    return listed


def stage_modules(stage: str) -> set[str]:
    found = set()
    for path in (ROOT / stage).rglob("*.py"):
        relative = path.relative_to(ROOT).as_posix()
        if path.name != "__init__.py" and not relative.startswith(GENERATED):
            found.add(relative)
    return found


def test_the_rule_reads_folders_nesting_and_parentheses() -> None:
    text = "\n".join(
        [
            "## Packages",
            "",
            "```text",
            "service/   settings.py  errors.py (ServiceError; not run.py)",
            "           server.py (lifecycle:",
            "           spans lines)  cli.py",
            "  engine/  core.py  <family>.py",
            "    request/  batcher.py + queue.py",
            "  grpc/    calls.py",
            "tests/     mirrors the packages",
            "```",
        ]
    )
    assert listed_modules(text) == {
        "service/settings.py",
        "service/errors.py",
        "service/server.py",
        "service/cli.py",
        "service/engine/core.py",
        "service/engine/request/batcher.py",
        "service/engine/request/queue.py",
        "service/grpc/calls.py",
    }


@pytest.mark.parametrize("stage", STAGES)
def test_every_module_is_in_the_package_list(stage: str) -> None:
    listed = listed_modules(ARCHITECTURE.read_text(encoding="utf-8"))
    missing = sorted(stage_modules(stage) - listed)
    assert not missing, f"modules missing from docs/architecture.md's package list: {missing}"


@pytest.mark.parametrize("stage", STAGES)
def test_every_module_in_the_package_list_exists(stage: str) -> None:
    listed = listed_modules(ARCHITECTURE.read_text(encoding="utf-8"))
    stale = sorted(name for name in listed - stage_modules(stage) if name.startswith(f"{stage}/"))
    assert not stale, f"docs/architecture.md's package list names modules that do not exist: {stale}"
