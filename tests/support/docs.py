"""The shell commands of the README and docs/*.md: every fenced bash/sh/shell block, one
command per line (backslash continuations joined, comment-only lines dropped), and running
one in a session of its own so that nothing it starts outlives it."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

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


def start_session(text: str, cwd: Path, env: dict[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    """`bash -c text` in a session of its own, output to `log`."""
    return subprocess.Popen(
        ["bash", "-c", text], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def stop_session(process: subprocess.Popen[bytes]) -> None:
    """Kill whatever of the session is left (background children included)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def run_session(text: str, cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Exit status (-1 past `timeout`) and output of `bash -c text`."""
    with tempfile.TemporaryFile() as log:
        process = start_session(text, cwd, env, log)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = -1
        finally:
            stop_session(process)
        log.seek(0)
        return code, log.read().decode(errors="replace")
