"""One call's walk through the server, recorded by a profile hook on the thread that serves it.

    python -m tests.support.walk   # the walks of docs/architecture.md ("One call, walked")

A *step* is a call from one attnserve module into another (or into attnserve from outside:
the transport handing the call over, or a task the call started). A coroutine resumed by
the event loop is not a new step, only its first start is. Steps up to and including the
one into the runtime's `RuntimeSession.run_rows` (which pads a batch's rows and runs
onnxruntime) are the way down; the steps after it, the way back. `functions` counts every
attnserve function called on the thread (coroutine resumptions included), the figure cProfile
gives for a call.
"""

from __future__ import annotations

import dis
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import attnserve.service

ROOT = str(Path(attnserve.service.__file__).resolve().parent.parent)
RUNTIME = "service/engine/models/runtime.py"
RUN = "RuntimeSession.run_rows"  # where onnxruntime runs: the end of the way down
# Checks that are not steps of a call: the service's own debugging and test helpers.
SKIPPED = ("tests/", "kit/", ".venv/")


@dataclass(frozen=True)
class Step:
    module: str  # the callee's file below the package root, e.g. "service/calls/call.py"
    name: str  # the callee's qualified name

    def __str__(self) -> str:
        return f"{self.module.removesuffix('.py')}:{self.name}"


@dataclass
class Walk:
    down: list[Step] = field(default_factory=list)
    back: list[Step] = field(default_factory=list)
    functions: int = 0


def _module(code: CodeType, cache: dict[CodeType, str | None]) -> str | None:
    if code in cache:
        return cache[code]
    path = code.co_filename
    module = None
    if path.startswith(ROOT + "/"):
        relative = path[len(ROOT) + 1 :]
        if not relative.startswith(SKIPPED):
            module = relative
    cache[code] = module
    return module


def _first_resume(code: CodeType, cache: dict[CodeType, int]) -> int:
    """The offset of the code's first RESUME: a frame past it is a resumed coroutine."""
    if code not in cache:
        cache[code] = next(
            (ins.offset for ins in dis.get_instructions(code) if ins.opname == "RESUME"), 0
        )
    return cache[code]


class Recorder:
    """A profile hook recording the walk of the calls made while it is installed on a thread."""

    def __init__(self) -> None:
        self.walk = Walk()
        self._modules: dict[CodeType, str | None] = {}
        self._resumes: dict[CodeType, int] = {}
        self._reached = False  # whether the way down has reached the runtime

    def hook(self, frame: FrameType, event: str, _: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        module = _module(code, self._modules)
        if module is None:
            return
        self.walk.functions += 1
        if frame.f_lasti > _first_resume(code, self._resumes):
            return  # a coroutine or generator resumed, not started
        caller = frame.f_back
        while caller is not None and _module(caller.f_code, self._modules) is None:
            caller = caller.f_back
        if caller is not None and _module(caller.f_code, self._modules) == module:
            return
        step = Step(module, code.co_qualname)
        if self._reached:
            self.walk.back.append(step)
        else:
            self.walk.down.append(step)
            self._reached = module == RUNTIME and step.name == RUN

    def install(self) -> None:
        sys.setprofile(self.hook)

    @staticmethod
    def remove() -> None:
        sys.setprofile(None)


@contextmanager
def recording() -> Iterator[Recorder]:
    """A recorder installed on the calling thread for the block."""
    recorder = Recorder()
    recorder.install()
    try:
        yield recorder
    finally:
        recorder.remove()


# --- one call per front end, recorded on a real server --------------------------------------

MODEL = "car-order"
TEXT = "a white car"
FRONT_ENDS = ("native gRPC", "JSON", "V2 gRPC", "V2 REST")


class Callers:
    """One single-text call per front end to `server`, each over a connection kept open (its
    setup is the connection's, not the call's)."""

    def __init__(self, server: Any) -> None:
        import http.client

        import grpc

        from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
        from kit.v2 import MODEL_INFER, text_request

        self._channel = grpc.insecure_channel(server.target)
        raw = {"request_serializer": None, "response_deserializer": None}
        self._classify = self._channel.unary_unary("/attnserve.v1.Classifier/Classify", **raw)
        self._infer = self._channel.unary_unary(MODEL_INFER, **raw)
        self._native = pb.ClassifyRequest(model=MODEL, texts=[TEXT]).SerializeToString()
        self._v2 = text_request(MODEL, [TEXT]).SerializeToString()
        self._http = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
        self._json = json.dumps({"texts": [TEXT]})
        tensor = {"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": [TEXT]}
        self._rest = json.dumps({"inputs": [tensor]})

    def _post(self, path: str, body: str) -> None:
        self._http.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = self._http.getresponse()
        data = response.read()
        assert response.status == 200, data[:300]

    def call(self, front_end: str) -> None:
        if front_end == "native gRPC":
            self._classify(self._native, timeout=30)
        elif front_end == "V2 gRPC":
            self._infer(self._v2, timeout=30)
        elif front_end == "JSON":
            self._post(f"/v1/models/{MODEL}:classify", self._json)
        else:
            self._post(f"/v2/models/{MODEL}/infer", self._rest)

    def close(self) -> None:
        self._http.close()
        self._channel.close()


def walk_of(running: Any, callers: Callers, front_end: str, tries: int = 200) -> Walk:
    """The walk of one call from `front_end` that ran on the event loop: the lone path, which a
    single call at a time takes once the model's one-text cost is known (a call that went to a
    batcher thread, a probe among them, is tried again). A few calls first: a front end's first
    call builds what it keeps per model (V2's contract)."""
    for _ in range(3):
        callers.call(front_end)
    for _ in range(tries):
        recorder = Recorder()
        running.run(_on_loop(recorder.install))
        try:
            callers.call(front_end)
        finally:
            running.run(_on_loop(recorder.remove))
        if recorder.walk.down and recorder.walk.down[-1].name == RUN:
            return recorder.walk
        time.sleep(0.11)  # past the lone window of the overlap a thread's probe may have seen
    raise AssertionError(f"no {front_end} call ran on the event loop in {tries} tries")


async def _on_loop(action: Callable[[], None]) -> None:
    action()


def render(walks: dict[str, Walk]) -> str:
    """The walks as docs/architecture.md writes them: one block per front end."""
    blocks = []
    for front_end, walk in walks.items():
        lines = [f"{front_end}: {len(walk.down)} down, {len(walk.back)} back"]
        lines += [f"  v {step}" for step in walk.down]
        lines += [f"  ^ {step}" for step in walk.back]
        blocks.append("```walk\n" + "\n".join(lines) + "\n```")
    return "\n\n".join(blocks)


def documented(page: str) -> dict[str, tuple[list[str], list[str]]]:
    """The walks written in a page: front end -> (steps down, steps back)."""
    walks: dict[str, tuple[list[str], list[str]]] = {}
    for block in page.split("```walk\n")[1:]:
        head, *lines = block.split("\n```", 1)[0].splitlines()
        front_end = head.split(":", 1)[0]
        walks[front_end] = (
            [line.strip()[2:] for line in lines if line.strip().startswith("v ")],
            [line.strip()[2:] for line in lines if line.strip().startswith("^ ")],
        )
    return walks


def main() -> None:
    import tempfile

    from tests.support.shipped import serving_shipped

    with tempfile.TemporaryDirectory() as root, serving_shipped(Path(root)) as running:
        callers = Callers(running.server)
        try:
            walks = {front_end: walk_of(running, callers, front_end) for front_end in FRONT_ENDS}
        finally:
            callers.close()
    print(render(walks))


if __name__ == "__main__":
    main()
