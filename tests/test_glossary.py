"""docs/architecture.md's glossary against the code: each name once, and each defined (a
class, function or constant of that name) in every module the glossary says it lives in."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def glossary() -> list[tuple[str, list[str]]]:
    """(name, [module paths]) per row of the glossary table."""
    text = DOC.read_text().split("## Glossary", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows.append((cells[0].strip("`"), re.findall(r"`([^`]+\.py)`", cells[2])))
    return rows


def defined(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
    return names


def test_the_glossary_names_each_thing_once() -> None:
    names = [name for name, _ in glossary()]
    assert len(names) > 20
    assert len(names) == len(set(names)), sorted(name for name in names if names.count(name) > 1)


def test_each_name_lives_where_the_glossary_says() -> None:
    missing = [
        f"{name} in {where}"
        for name, places in glossary()
        for where in places
        if not (ROOT / where).is_file() or name not in defined(ROOT / where)
    ]
    assert all(places for _, places in glossary())
    assert missing == []


def test_no_other_module_of_the_server_defines_a_glossary_class() -> None:
    """A second class of a glossary name (outside the modules listed) is a second meaning."""
    listed = {name: set(places) for name, places in glossary()}
    elsewhere = []
    for path in sorted((ROOT / "service").rglob("*.py")):
        relative = str(path.relative_to(ROOT))
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.name in listed and relative not in listed[node.name]:
                elsewhere.append(f"{node.name} in {relative}")
    assert elsewhere == []
