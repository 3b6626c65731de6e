"""How `make test` spreads the suite over two pytest-xdist workers, and which tests run alone.

`make test` (and `make check`) run pytest twice: first `-n N -m "not serial"` (two workers for
`make test`, three for `make check`), each test file on one worker so that its module fixtures
(servers, trained runs) are built once, then
`--serial-files -m serial` without workers, importing only the files that hold serial tests.
The long units below go first, one to a worker, so the short files fill the time around them
instead of queueing behind them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

# Run alone, after the others (a file, or one test as PATH::NAME): they bound a server's memory,
# time its event loop, drive it to overload or need an idle core, which another process's work
# would take.
SERIAL = frozenset({
    "tests/service/test_memory.py",
    "tests/training/test_memory.py",
    "tests/service/test_loop_responsive.py",
    "tests/service/test_soak.py",
    "tests/service/engine/request/test_overload.py",
    "tests/service/engine/models/test_threads.py::test_a_compute_bound_graph_is_measured_to_take_every_core",
})  # fmt: skip
# Files of a minute or more, each unit on one worker: the containers (podman, one image build
# that the rest reuse, fixed container names) and the long multi-process runs (two training
# processes, fresh venvs, the serving suite's peers).
LONG_UNITS: dict[str, str] = {
    "tests/deploy/test_images.py": "containers",
    "tests/deploy/test_compose_stack.py": "containers",
    "tests/deploy/test_rehearsal.py": "containers",
    "tests/deploy/test_tracing_stack.py": "containers",
    "tests/loadtest/test_compose_command.py": "containers",
    "tests/training/test_distributed.py": "processes",
    "tests/training/test_distributed_machines.py": "processes",
    "tests/training/test_compare.py": "processes",
    "tests/test_packaging.py": "processes",
    "tests/bench/test_serving_suite.py": "processes",
}
UNIT_ORDER = ("containers", "processes")
_SERIAL_FILES = frozenset(entry.split("::", 1)[0] for entry in SERIAL)


def _where(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--serial-files", action="store_true",
        help="collect only the files that hold SERIAL tests (the serial phase: importing the other "
        "200 files would cost more than its tests take)",
    )  # fmt: skip


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under --serial-files, a test file that holds no SERIAL test is not imported."""
    if not config.getoption("serial_files") or collection_path.suffix != ".py":
        return None
    if collection_path.name == "conftest.py" or not collection_path.is_relative_to(config.rootpath):
        return None
    where = collection_path.relative_to(config.rootpath).as_posix()
    return True if where not in _SERIAL_FILES else None


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's `loadfile` (each file's tests on one worker), the LONG_UNITS one unit each."""
    from xdist.scheduler import LoadFileScheduling

    class LongUnits(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            where = nodeid.split("::", 1)[0]
            return LONG_UNITS.get(where, where)

    return LongUnits(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark SERIAL tests; on a worker, put the long units first (the schedule keeps the
    workers' order; the sort is stable)."""
    for item in items:
        where = _where(item)
        if where in SERIAL or f"{where}::{getattr(item, 'originalname', item.name)}" in SERIAL:
            item.add_marker(pytest.mark.serial)
    if hasattr(config, "workerinput"):
        first = {unit: rank for rank, unit in enumerate(UNIT_ORDER)}
        items.sort(key=lambda item: first.get(LONG_UNITS.get(_where(item), ""), len(first)))
