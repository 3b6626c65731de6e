"""A small Dockerfile reader: instructions grouped by build stage, continuation lines joined."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, USER, CMD, ...
    args: str


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [i.args for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> str | None:
        found = self.all(keyword)
        return found[-1] if found else None


def instructions(path: Path) -> list[Instruction]:
    logical: list[str] = []
    pending = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue  # Docker drops comment lines, also inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    result = []
    for text in logical:
        keyword, _, args = text.partition(" ")
        result.append(Instruction(keyword.upper(), args.strip()))
    return result


def stages(path: Path) -> list[Stage]:
    found: list[Stage] = []
    for ins in instructions(path):
        if ins.keyword == "FROM":
            m = re.fullmatch(r"(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", ins.args, re.IGNORECASE)
            if m is None:
                raise ValueError(f"{path}: cannot read FROM {ins.args}")
            found.append(Stage(m.group(1), m.group(2)))
        elif found:
            found[-1].instructions.append(ins)
    return found


def lineage(all_stages: list[Stage], stage: Stage) -> Stage:
    """`stage` with the instructions of the stages it is built FROM (by name) prepended."""
    by_name = {s.name: s for s in all_stages if s.name}
    chain = [stage]
    while chain[0].base in by_name and by_name[chain[0].base] is not chain[0]:
        chain.insert(0, by_name[chain[0].base])
    merged = Stage(chain[0].base, stage.name)
    for link in chain:
        merged.instructions.extend(link.instructions)
    return merged


def exec_form(args: str) -> list[str] | None:
    """The JSON array of an exec-form CMD/ENTRYPOINT/HEALTHCHECK CMD, or None for shell form."""
    try:
        value = json.loads(args)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None
