"""Peak memory of a real training run on a large long-text corpus, against its budget.

``attnserve-train --data`` runs on a seeded JSONL corpus in a child process that reports its
peak RSS (VmHWM); the budget is 1.5 x (16 bytes a parameter + one int32 id matrix + 300 MB).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench import sections
from bench.serving.memory import MB, Sampler
from bench.training.long_texts import write_jsonl

BASE_MB, HEADROOM = 300, 1.5
# Runs the training CLI and writes the process's peak RSS to argv[1] as it exits. The peak is
# read from /proc/self/status, not from the parent's wait4(): Linux carries the high-water mark
# of the pre-exec image (the parent's pages) over into the child's rusage.
RUN_AND_REPORT_PEAK = """
import runpy, sys
report, sys.argv = sys.argv[1], ["attnserve-train", *sys.argv[2:]]
try:
    runpy.run_module("attnserve.training.cli", run_name="__main__")
finally:
    with open("/proc/self/status") as status, open(report, "w") as out:
        out.write(next(line for line in status if line.startswith("VmHWM:")).split()[1])
"""


def run_training(args: list[str], env: dict[str, str], timeout: float, work: Path) -> dict[str, object]:
    """Run the training CLI with ``args``: its peak RSS, an RSS timeline, and whether it timed out."""
    report = work / "peak-kib.txt"
    report.unlink(missing_ok=True)
    start, timed_out = time.monotonic(), False
    with open(work / "train.log", "w") as out:
        child = subprocess.Popen([sys.executable, "-c", RUN_AND_REPORT_PEAK, str(report), *args], env=env,
                                 stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        with Sampler(child.pid, 0.5) as sampler:
            try:
                status = child.wait(timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                # KeyboardInterrupt: the child reports its peak on the way out
                child.send_signal(signal.SIGINT)
                try:
                    status = child.wait(60)
                except subprocess.TimeoutExpired:
                    child.kill()
                    status = child.wait()
            except BaseException:  # Ctrl-C or SIGTERM: the training run ends with the bench
                child.kill()
                child.wait()
                raise
    samples = [(round(s.seconds, 1), round(s.rss_mb, 1)) for s in sampler.samples]
    reported = int(report.read_text()) / 1024 if report.is_file() else math.nan
    sampled = max((rss for _, rss in samples), default=0.0)
    # The kernel updates the high-water mark lazily, so a sample can top it by a page or two.
    peak = sampled if math.isnan(reported) else max(reported, sampled)
    return {"peak_mb": peak, "reported_peak_mb": reported, "seconds": time.monotonic() - start,
            "exit_status": status, "stopped_by_timeout": timed_out, "timeline": samples}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = sections.parser("training-memory", __doc__, json_out=True)
    parser.add_argument("--rows", type=int, default=120_000)
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--max-seconds", type=float, default=120.0, help="training budget of the run")
    parser.add_argument("--timeout", type=float, default=3600.0, help="stop the run after this long")
    parser.add_argument("--pythonpath", type=Path, help="prepend to PYTHONPATH of the run")
    parser.add_argument("--work", type=Path, help="folder for the corpus and the run (default: temporary)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="attnserve-memory-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if not (data := work / f"long-texts-{args.rows}.jsonl").is_file():
            write_jsonl(data, args.rows)
        command = ["--data", str(data), "--model", "transformer", "--max-len", str(args.max_len),
                   "--epochs", "1", "--max-seconds", str(args.max_seconds), "--no-progress",
                   "--out", str(work / "run")]  # fmt: skip
        env = dict(os.environ)
        if args.pythonpath is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(args.pythonpath), env.get("PYTHONPATH")]))
        result = run_training(command, env, args.timeout, work)
        metrics = work / "run" / "metrics.json"
        params = json.loads(metrics.read_text())["params"] if metrics.is_file() else None
    result.update(rows=args.rows, max_len=args.max_len, params=params, pythonpath=str(args.pythonpath or ""))
    matrix_mb = args.rows * args.max_len * 4 / MB
    stopped = ", stopped by --timeout" if result["stopped_by_timeout"] else ""
    print(f"peak RSS {result['peak_mb']:.0f} MB over {result['seconds']:.0f} s "
          f"(exit status {result['exit_status']}{stopped})")  # fmt: skip
    if params is not None:
        model_mb = params * 16 / MB
        budget = HEADROOM * (model_mb + matrix_mb + BASE_MB)
        result.update(model_and_optimizer_mb=model_mb, id_matrix_mb=matrix_mb, budget_mb=budget)
        share = result["peak_mb"] / budget
        print(f"budget {budget:.0f} MB = {HEADROOM} x (model+optimizer {model_mb:.0f} MB + id matrix "
              f"{matrix_mb:.0f} MB + {BASE_MB} MB): peak is {share:.2f} of it")  # fmt: skip
    sections.write_json(args.out, result)
    return 0 if result["exit_status"] == 0 else 1
