"""Where the server's CPU goes under load: py-spy samples attnserve while the benchmark drives it.

The server (one worker, default settings) takes closed-loop single-text calls at the
saturation concurrency while `py-spy record` samples every thread of it. Written to the
output folder: the collapsed stacks (`profile.txt`, the input of any flame-graph tool), a
flame graph (`profile.svg`, from a second recording of the same load) and a summary of the
functions with the most samples, by thread, in `profile.md`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.loadgen import run_closed
from bench.plan import Plan
from bench.servers import attnserve
from bench.texts import prepared

_FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>[^:()]+)(?::\d+)?\)$")


def py_spy() -> str | None:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return found if Path(found).is_file() else None


def record(tool: str, pid: int, seconds: float, out: Path, fmt: str) -> subprocess.Popen[bytes]:
    command = [tool, "record", "--pid", str(pid), "--duration", f"{max(1, round(seconds))}", "--rate", "250",
               "--threads", "--nonblocking", "--format", fmt, "--output", str(out)]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def frame_name(frame: str) -> str:
    """'run_batch (service/model.py:97)' -> 'run_batch (service/model.py)'; site-packages trimmed."""
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip()
    path = match["file"].split("site-packages/")[-1].split("/work/main/")[-1]
    return f"{match['name']} ({path})"


def summarize(collapsed: str, top: int = 12) -> dict[str, Any]:
    """Samples by thread, and the functions with the most samples on top of the stack (self)
    and anywhere in it (inclusive), as shares of all samples."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        thread, frames = (frames[0], frames[1:]) if frames[0].startswith(("thread", "process")) else ("", frames)
        names = [frame_name(f) for f in frames] or ["(no Python frame)"]
        total += count
        threads[thread or "(all)"] += count
        own[names[-1]] += count
        for name in set(names):
            inclusive[name] += count
    if total == 0:
        return {"samples": 0, "threads": {}, "self": [], "inclusive": []}

    def share(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(name, count / total) for name, count in counter.most_common(top)]

    return {"samples": total, "threads": dict(share(threads)), "self": share(own), "inclusive": share(inclusive)}


def markdown(summary: dict[str, Any], title: str) -> str:
    lines = [f"### {title}", "", f"{summary['samples']} samples.", "", "| thread | share |", "|---|---:|"]
    lines += [f"| {name} | {value:.1%} |" for name, value in summary["threads"].items()]
    for key, heading in (("self", "on top of the stack (self)"), ("inclusive", "anywhere in the stack")):
        lines += ["", f"| function, {heading} | share |", "|---|---:|"]
        lines += [f"| `{name}` | {value:.1%} |" for name, value in summary[key]]
    return "\n".join(lines) + "\n"


def profile(repository: Path, model: str, texts: Sequence[str], plan: Plan, out: Path) -> dict[str, Any]:
    tool = py_spy()
    if tool is None:
        raise FileNotFoundError("py-spy is not installed in this environment (pip install py-spy)")
    single = prepared("native", model, texts, 1, False)
    results: dict[str, Any] = {}
    with attnserve(repository) as server:
        formats = [("raw", out / "profile.txt")] + ([("flamegraph", out / "profile.svg")] if plan.name != "tiny" else [])
        for fmt, path in formats:
            recorder = record(tool, server.pid, plan.profile_seconds, path, fmt)
            load = threading.Thread(
                target=run_closed,
                args=(server.target, single, plan.saturation, plan.profile_seconds + 1.0),
                kwargs={"warmup": 0.0},
            )
            load.start()
            _, errors = recorder.communicate(timeout=plan.profile_seconds + 60)
            load.join()
            if recorder.returncode != 0 or not path.is_file():
                raise RuntimeError(f"py-spy failed ({recorder.returncode}): {errors.decode(errors='replace')[-600:]}")
            results[fmt] = str(path)
    summary = summarize((out / "profile.txt").read_text())
    title = f"attnserve under closed-loop load, concurrency {plan.saturation}, single-text calls"
    (out / "profile.md").write_text(markdown(summary, title))
    return {**results, "summary": summary, "title": title}
