"""One kit drives the server for bench/, loadtest/ and tests/: each of its pieces is defined
once, in kit/, and every kit module is in docs/architecture.md's package list."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_architecture import ARCHITECTURE, listed_modules

ROOT = Path(__file__).resolve().parents[2]
DRIVERS = ("bench", "loadtest", "kit", "tests/support", "tests/bench", "tests/loadtest")
# (what, the pattern of its definition, the one module that may define it)
ONCE = [
    ("free_port", r"^def free_port\(", "kit/ports.py"),
    ("the server launcher", r"^def spawn\(", "kit/launch.py"),
    ("SIGTERM-aware asyncio.run", r"^def run_async\(", "kit/launch.py"),
    ("the V2 TEXT request builder", r'name="TEXT", datatype="BYTES"', "kit/v2.py"),
    ("the call ledger", r"^class Ledger\b", "kit/ledger.py"),
    ("the percentile rule", r"^def percentile\(|np\.percentile\(|quantiles\(", "kit/ledger.py"),
    ("the closed loop", r"^async def closed_loop\(", "kit/load.py"),
    ("the open loop", r"^async def open_loop\(", "kit/load.py"),
    ("the load generator's callers", r"^async def (callers|keep_calling)\(", "kit/load.py"),
    ("the result type", r"^class Point\b", "kit/results.py"),
    ("the perf_analyzer run", r"--stability-percentage", "kit/perf_analyzer.py"),
]


def _sources() -> dict[str, str]:
    return {
        path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
        for folder in DRIVERS
        for path in sorted((ROOT / folder).rglob("*.py"))
        if "tests/kit/" not in path.as_posix()
    }


@pytest.mark.parametrize(("what", "pattern", "home"), ONCE, ids=[what for what, _, _ in ONCE])
def test_each_piece_is_defined_once_in_kit(what: str, pattern: str, home: str) -> None:
    found = sorted(name for name, text in _sources().items() if re.search(pattern, text, flags=re.MULTILINE))
    assert found == [home], f"{what} is defined in {found}, and only {home} may define it"


def test_every_kit_module_is_in_the_package_list() -> None:
    listed = {
        name for name in listed_modules(ARCHITECTURE.read_text(encoding="utf-8")) if name.startswith("kit/")
    }
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "kit").glob("*.py") if p.name != "__init__.py"}
    assert listed == modules


def test_the_percentile_interpolates_between_the_nearest_ranks() -> None:
    from kit.ledger import percentile

    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 99) == pytest.approx(4.96)
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) != percentile([], 50)  # nan: nothing measured
