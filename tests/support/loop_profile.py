"""Where a lone single-text call's time on the event loop goes, by package.

    python -m tests.support.loop_profile "native gRPC" "V2 gRPC"   # front ends of walk.py

A server on the shipped car-order model (in this process); per front end, cProfile on the
event loop's thread over `CALLS` calls one after another through a connection kept open,
the lone path (walk.py), printed per call: the time and calls of each package, and the C
time split into onnxruntime's run, waiting in epoll and grpc's callbacks. cProfile's own
overhead inflates every Python call: read the split, not the sums.
"""

from __future__ import annotations

import collections
import cProfile
import pstats
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.support.shipped import serving_shipped
from tests.support.walk import ROOT, Callers, walk_of

CALLS = 3000
C_CODE = "C"


def _package(path: str) -> str:
    if "site-packages/" in path:
        return path.split("site-packages/")[1].split("/")[0].removesuffix(".py")
    if path.startswith(ROOT + "/"):
        return "attnserve"
    if path.startswith(("~", "<")):
        return C_CODE
    return "stdlib:" + path.rsplit("/", 2)[-2] if "/lib/python3" in path else path


def _report(front_end: str, stats: dict[Any, Any]) -> None:
    seconds: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    c_parts: collections.Counter[str] = collections.Counter()
    for (path, _, name), (_, count, own, _, _) in stats.items():
        package = _package(path)
        seconds[package] += own
        calls[package] += count
        if package == C_CODE:
            part = "onnxruntime run" if "onnxruntime_pybind11_state.run" in name else (
                "epoll" if "epoll" in name else "grpc callbacks (Context.run)" if "Context' objects" in name
                else "other C")  # fmt: skip
            c_parts[part] += own
    print(f"## {front_end}: {sum(seconds.values()) / CALLS * 1e6:.0f} us a call on the loop under cProfile")
    for package, total in seconds.most_common(8):
        print(f"  {total / CALLS * 1e6:7.1f} us  {calls[package] / CALLS:6.1f} calls  {package}")
    parts = ", ".join(f"{part} {total / CALLS * 1e6:.1f} us" for part, total in c_parts.most_common())
    print(f"  C: {parts}")


def main(front_ends: list[str]) -> None:
    with tempfile.TemporaryDirectory() as root, serving_shipped(Path(root)) as running:
        callers = Callers(running.server)
        try:
            for front_end in front_ends:
                walk_of(running, callers, front_end)  # warm, and on the lone path
                profile = cProfile.Profile()

                async def on(profile: cProfile.Profile = profile) -> None:
                    profile.enable()

                async def off(profile: cProfile.Profile = profile) -> None:
                    profile.disable()

                running.run(on())
                for _ in range(CALLS):
                    callers.call(front_end)
                running.run(off())
                _report(front_end, pstats.Stats(profile).stats)  # type: ignore[attr-defined]
        finally:
            callers.close()


if __name__ == "__main__":
    main(sys.argv[1:] or ["native gRPC", "V2 gRPC"])
