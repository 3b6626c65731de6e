"""The shell commands of the README and docs/*.md: every fenced bash/sh/shell block, one
command per line (backslash continuations joined, comment-only lines dropped)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SHELL_FENCES = frozenset({"bash", "sh", "shell", "console"})
_FENCE = re.compile(r"^```\s*([\w-]*)\s*$")


@dataclass(frozen=True)
class DocCommand:
    document: str  # relative to the repository root
    line: int  # where the command starts
    text: str  # without its trailing comment

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"


def without_comment(text: str) -> str:
    """`text` without a trailing `# comment`: a '#' after whitespace, outside quotes."""
    quote = ""
    for index, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and index > 0 and text[index - 1].isspace():
            return text[:index].rstrip()
    return text


def shell_commands(root: Path, document: Path) -> list[DocCommand]:
    name = document.relative_to(root).as_posix()
    commands: list[DocCommand] = []
    fence: str | None = None
    pending: list[str] = []
    start = 0
    for number, line in enumerate(document.read_text().splitlines(), start=1):
        match = _FENCE.match(line)
        if match is not None:
            fence = None if fence is not None else match.group(1).lower()
            continue
        if fence not in SHELL_FENCES:
            continue
        if not pending:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            start = number
        if line.rstrip().endswith("\\"):
            pending.append(line.rstrip()[:-1].rstrip())
            continue
        pending.append(line.strip())
        text = " ".join(part.strip() for part in pending)
        commands.append(DocCommand(name, start, without_comment(text)))
        pending = []
    return commands


def documents(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]
