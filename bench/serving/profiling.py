"""Where the server's CPU goes under load: py-spy samples attnserve while the benchmark drives it.

Writes profile.txt (collapsed stacks), profile.svg (a flame graph from a second recording)
and profile.md (CPU by thread, samples by kind of work, top functions). py-spy sees Python
frames only: grpc.aio's Cython call handling lands on `Handle._run` (asyncio/events.py).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

from bench.render import markdown_table
from bench.serving.plan import Plan
from bench.serving.texts import prepared
from kit.launch import attnserve
from kit.load import run_closed

_FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>[^:()]+)(?::\d+)?\)$")
KINDS = (  # (kind, test on (thread, frame names)); the first that matches wins
    ("onnxruntime Session.run (inference thread)", lambda t, f: f[-1].startswith("Session.run ")),
    ("tokenization (tokenizers, Rust)", lambda t, f: any(n.startswith("TextTokenizer.encode ") for n in f)),
    ("gRPC poller thread", lambda t, f: "_poll_wrapper" in t),
    ("grpc.aio call handling (Cython) and asyncio task steps", lambda t, f: f[-1].startswith("Handle._run ")),
    ("event loop waiting in epoll", lambda t, f: f[-1].startswith("EpollSelector.select ")),
    ("attnserve Python code (service/)", lambda t, f: any("(service/" in n for n in f)),
    ("other (asyncio, prometheus_client, threads)", lambda t, f: True),
)


def py_spy() -> str | None:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return found if Path(found).is_file() else None


def frame_name(frame: str) -> str:
    """'run_batch (service/model.py:97)' -> 'run_batch (service/model.py)'; site-packages trimmed."""
    if (match := _FRAME.match(frame.strip())) is None:
        return frame.strip()
    return f"{match['name']} ({match['file'].split('site-packages/')[-1].split('/work/main/')[-1]})"


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) so far of each thread of `pid`, by thread id."""
    return {thread.id: thread.user_time + thread.system_time for thread in psutil.Process(pid).threads()}


def named_cpu(
    pid: int, before: dict[int, float], after: dict[int, float], collapsed: str
) -> dict[str, float]:
    """CPU seconds each thread spent between two `thread_cpu` readings, by its Python name (from
    py-spy's 'thread (TID): NAME;...' stack prefixes) or, for grpc's own threads, /proc's."""
    names: dict[int, str] = {}
    for match in re.finditer(r"^thread \((?:0x)?(\w+)\): ([^;]*);", collapsed, re.MULTILINE):
        names[int(match[1], 16) if match[0].startswith("thread (0x") else int(match[1])] = match[2]
    out: dict[str, float] = {}
    for tid, seconds in after.items():
        if tid not in names:
            try:
                names[tid] = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            except OSError:
                names[tid] = "?"
        out[f"{names[tid]} ({tid})"] = seconds - before.get(tid, 0.0)
    return out


def summarize(collapsed: str, top: int = 12) -> dict[str, Any]:
    """Samples by thread and kind of work, and the functions with the most samples on top of the
    stack (self) and anywhere in it (inclusive), as shares of all samples."""
    counters: dict[str, Counter[str]] = {key: Counter() for key in ("threads", "kinds", "self", "inclusive")}
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count, frames = int(count_text), stack.split(";")
        thread = frames.pop(0) if frames[0].startswith(("thread", "process")) else ""
        names = [frame_name(f) for f in frames] or ["(no Python frame)"]
        counters["threads"][thread or "(all)"] += count
        counters["self"][names[-1]] += count
        counters["kinds"][next(kind for kind, test in KINDS if test(thread, names))] += count
        for name in set(names):
            counters["inclusive"][name] += count
    if (total := sum(counters["threads"].values())) == 0:
        return {"samples": 0, "threads": {}, "kinds": {}, "self": [], "inclusive": []}
    shares = {
        key: [(name, n / total) for name, n in counter.most_common(top)] for key, counter in counters.items()
    }
    return {"samples": total, **shares, "threads": dict(shares["threads"]), "kinds": dict(shares["kinds"])}


def tables(summary: dict[str, Any], cpu: dict[str, float], calls: int, *, full: bool = True) -> list[str]:
    """The profile as markdown tables: the threads' CPU, the kinds of work, the functions (the
    report's summary, `full=False`, keeps the busiest threads and the self time only)."""
    busy = sorted(((n, s) for n, s in cpu.items() if s > 0), key=lambda item: -item[1])[: None if full else 6]
    rows = [[f"`{n}`", f"{s:.2f}", f"{1000 * s / calls:.3f}" if calls else "n/a"] for n, s in busy]
    lines = [f"{calls:,} single-text calls answered while py-spy recorded.", ""]
    lines += [*markdown_table(["thread", "CPU seconds", "CPU ms per call"], rows), ""]
    functions = (("self", "self time"), ("inclusive", "anywhere in the stack"))[: 2 if full else 1]
    shares: list[tuple[str, Any]] = [("kind of work", summary["kinds"].items())]
    shares += [("thread", summary["threads"].items())] if full else []
    shares += [(f"function, {heading}", [(f"`{n}`", v) for n, v in summary[key][: None if full else 10]])
               for key, heading in functions]  # fmt: skip
    for header, pairs in shares:
        lines += [*markdown_table([header, "share of samples"], [[n, f"{v:.1%}"] for n, v in pairs]), ""]
    return [*lines, f"{summary['samples']} samples."]


def profile(repository: Path, model: str, texts: Sequence[str], plan: Plan, out: Path) -> dict[str, Any]:
    if (tool := py_spy()) is None:
        raise FileNotFoundError("py-spy is not installed in this environment (pip install py-spy)")
    single = prepared("native", model, texts, 1, False)
    results: dict[str, Any] = {}
    formats = [("raw", out / "profile.txt"), ("flamegraph", out / "profile.svg")]
    duration = str(max(1, round(plan.profile_seconds)))
    with attnserve(repository) as server:
        for fmt, path in formats[: 1 if plan.name == "tiny" else 2]:  # tiny: no flame graph
            before = thread_cpu(server.pid)
            command = [tool, "record", "--pid", str(server.pid), "--duration", duration, "--rate", "250",
                       "--threads", "--nonblocking", "--format", fmt, "--output", str(path)]  # fmt: skip
            recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            with ThreadPoolExecutor(1) as pool:  # the load runs while py-spy records
                seconds = plan.profile_seconds + 1.0
                load = pool.submit(run_closed, server.target, single, plan.saturation, seconds, warmup=0.0)
                _, errors = recorder.communicate(timeout=plan.profile_seconds + 60)
            if fmt == "raw":
                readings, calls = (before, thread_cpu(server.pid)), load.result().calls
            if recorder.returncode != 0 or not path.is_file():
                raise RuntimeError(
                    f"py-spy failed ({recorder.returncode}): {errors.decode(errors='replace')[-600:]}"
                )
            results[fmt] = str(path)
        collapsed = (out / "profile.txt").read_text()
        cpu = named_cpu(server.pid, *readings, collapsed)
    summary = summarize(collapsed)
    title = f"attnserve under closed-loop load, concurrency {plan.saturation}, single-text calls"
    (out / "profile.md").write_text("\n".join([f"### {title}", "", *tables(summary, cpu, calls)]) + "\n")
    return {**results, "summary": summary, "title": title, "thread_cpu_s": cpu, "calls": calls}
