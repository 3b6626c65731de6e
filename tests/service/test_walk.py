"""The walk docs/architecture.md ("One call, walked") writes is the walk the code takes.

A real server on the shipped car-order model; one single-text call per front end (native
gRPC, the JSON API, V2 gRPC, V2 REST) with a profile hook on the event loop's thread that
records every call from one attnserve module into another (tests/support/walk.py). The page
is regenerated with `python -m tests.support.walk`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import RunningServer
from tests.support.shipped import serving_shipped
from tests.support.walk import FRONT_ENDS, Callers, Step, Walk, documented, render, walk_of

PAGE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


@pytest.fixture(scope="module")
def walks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Walk]]:
    with serving_shipped(tmp_path_factory.mktemp("walk")) as running:
        yield _record(running)


def _record(running: RunningServer) -> dict[str, Walk]:
    """Each front end's walk; one that differs from the page is recorded again, twice at most
    (on a busy machine a step of the call before can land in the hook): a page that no longer
    says what the code does fails all three."""
    page = documented(PAGE.read_text())
    callers = Callers(running.server)
    walks: dict[str, Walk] = {}
    try:
        for front_end in FRONT_ENDS:
            for _ in range(3):
                walk = walks[front_end] = walk_of(running, callers, front_end)
                if page.get(front_end) == ([str(s) for s in walk.down], [str(s) for s in walk.back]):
                    break
    finally:
        callers.close()
    return walks


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_the_page_writes_the_walk_the_code_takes(walks: dict[str, Walk], front_end: str) -> None:
    page = documented(PAGE.read_text())
    assert front_end in page, f"docs/architecture.md has no walk of {front_end}"
    down, back = page[front_end]
    walk = walks[front_end]
    fresh = render({front_end: walk})
    message = f"the {front_end} walk changed; regenerate it with python -m tests.support.walk:\n{fresh}"
    assert [str(step) for step in walk.down] == down, message
    assert [str(step) for step in walk.back] == back, message


def test_a_call_enters_the_call_layer_once_and_the_engine_once(walks: dict[str, Walk]) -> None:
    for front_end, walk in walks.items():
        steps = walk.down + walk.back
        assert _count(steps, "CallLayer.serve") == 1, front_end
        assert _count(steps, "Core.classify") == 1, front_end
        assert _count(steps, "Batcher.submit") == 1, front_end
        assert _count(steps, "gather") == 1, front_end  # the call's one result, built once


def test_the_engine_never_calls_up_into_the_call_layer_or_a_plane(walks: dict[str, Walk]) -> None:
    """From `Core.classify` to the runtime, every step is the engine's (or the metrics it owns)."""
    for front_end, walk in walks.items():
        names = [step.name for step in walk.down]
        inside = walk.down[names.index("Core.classify") :]
        assert all(step.module.startswith(("service/engine/", "service/bundle/", "service/observe/"))
                   for step in inside), (front_end, [str(s) for s in inside])  # fmt: skip


def _count(steps: list[Step], name: str) -> int:
    return sum(step.name == name for step in steps)
