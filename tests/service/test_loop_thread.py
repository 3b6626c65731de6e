"""What runs on the server's event loop, seen by a profile hook on the loop's own thread.

- An attribution's work that grows with its words and rows (finding words, building rows,
  solving KernelSHAP) never runs on the loop, where one large request would hold up every
  other call, health and metadata included.
- A lone call may run its batch on the loop, but a call still reading its body counts: the
  server is not alone while it is in flight (the lone rule counts calls from their arrival).
- A reload in the middle of an attribution call lets the call finish, its rows included.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest

from attnserve.service.engine.request import attribution
from attnserve.service.engine.request.runner import Runner
from tests.support.http import call
from tests.support.servers import RunningServer, free_port, make_settings

FAMILY = "attention_pool"


class LoopCalls:
    """Records the functions of `watched` that run on the thread that installs it."""

    def __init__(self, watched: dict[CodeType, str]) -> None:
        self.watched = watched
        self.seen: list[str] = []

    def hook(self, frame: FrameType, event: str, _: Any) -> None:
        if event == "call" and frame.f_code in self.watched:
            self.seen.append(self.watched[frame.f_code])

    async def install(self) -> None:
        sys.setprofile(self.hook)

    async def remove(self) -> None:
        sys.setprofile(None)


@pytest.fixture(scope="module")
def served(
    exported_bundle: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    repository = tmp_path_factory.mktemp("loop-thread")
    bundle = exported_bundle(FAMILY)
    shutil.copytree(bundle, repository / FAMILY / "1")
    with RunningServer(make_settings(repository, http_port=free_port(), max_attribution_rows=512)) as running:
        yield running


def _port(running: RunningServer) -> int:
    assert running.server is not None
    return running.server.http_port


def _classify(running: RunningServer, texts: list[str], **fields: Any) -> Any:
    reply = call(_port(running), "POST", f"/v1/models/{FAMILY}:classify", {"texts": texts, **fields})
    assert reply.status == 200, reply.body
    return reply.json()


def test_attribution_work_that_grows_with_the_words_never_runs_on_the_loop(served: RunningServer) -> None:
    watched = {
        attribution.words.__code__: "words",
        attribution.plan_text.__code__: "plan_text",
        attribution.scores.__code__: "scores",
        attribution._kernel_shap.__code__: "kernel_shap",
    }
    calls = LoopCalls(watched)
    texts = [" ".join(["hello there good food"] * 8)] * 6
    served.run(calls.install())
    try:
        shapley = _classify(served, texts, attribution="shapley", attribution_budget=40)
        occlusion = _classify(served, texts, attribution="occlusion")
    finally:
        served.run(calls.remove())
    assert all(r["attribution_rows"] > 0 for r in shapley["results"] + occlusion["results"])
    assert calls.seen == []


def _wait_for_lone_calls(running: RunningServer, calls: LoopCalls) -> None:
    """Single texts one by one until some run on the loop: the version's one-text cost is
    timed on a thread of its own after it loads, and until then none runs there."""
    deadline = time.monotonic() + 60
    while not calls.seen:
        assert time.monotonic() < deadline, "no lone call ever ran on the loop"
        _classify(running, ["hello there"])


def test_a_call_still_reading_its_body_keeps_other_calls_off_the_loop(served: RunningServer) -> None:
    calls = LoopCalls({Runner.__call__.__code__: "batch"})
    served.run(calls.install())
    try:
        _wait_for_lone_calls(served, calls)
        time.sleep(0.2)  # past any window in which calls were last seen to overlap
        with socket.create_connection(("127.0.0.1", _port(served))) as slow:
            body = b'{"texts": ["hello there"]}'
            head = (
                f"POST /v1/models/{FAMILY}:classify HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            slow.sendall(head.encode() + body[:5])  # admitted, its body still arriving
            time.sleep(0.2)
            calls.seen.clear()
            for _ in range(12):
                _classify(served, ["hello there"])
            on_loop = list(calls.seen)
            slow.sendall(body[5:])
            assert b"200 OK" in slow.recv(65536)
    finally:
        served.run(calls.remove())
    assert on_loop == [], "a call ran on the loop while another was in flight"


def test_a_reload_in_the_middle_of_an_attribution_call_lets_it_finish(served: RunningServer) -> None:
    """The call is accepted and its texts' rows are queued, then the version is closed (as a
    reload retires it): its attribution rows, a second job on the same batcher, must still run,
    as every accepted call's do. A batching delay keeps the first rows queued long enough for
    the close to come between the two jobs."""
    assert served.settings.repository is not None
    settings = make_settings(served.settings.repository, http_port=free_port(), max_delay_ms=50)
    with RunningServer(settings) as running:
        assert running.server is not None
        core = running.server.core
        model = core.resolve(FAMILY)
        port = running.server.http_port
        document = {"texts": ["hello there good food and more good food"] * 4, "attribution": "occlusion"}
        reply: dict[str, Any] = {}

        def send() -> None:
            reply["answer"] = call(port, "POST", f"/v1/models/{FAMILY}:classify", document)

        async def close_while_the_first_rows_wait() -> None:
            predictor = core.predictors.of(model)
            while not predictor.batcher.queued:
                await asyncio.sleep(0.001)
            await core.predictors.close(model)

        closing = asyncio.run_coroutine_threadsafe(close_while_the_first_rows_wait(), running.loop)
        sender = threading.Thread(target=send)
        sender.start()
        closing.result(30)
        sender.join(30)
        answer = reply["answer"]
        assert answer.status == 200, answer.body
        assert all(r["attribution_rows"] > 0 for r in answer.json()["results"])
        core.predictors.open(model)  # back, so that the server shuts down as it would
