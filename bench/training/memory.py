"""Peak memory of a real training run on a large long-text corpus, against its budget.

    python -m bench training-memory                    # 120,000 texts at 256 tokens
    python -m bench training-memory --tiny             # seconds (CI)

Writes the seeded corpus as JSONL, runs ``attnserve-train --data`` on it (default
transformer, one epoch, stopped by ``--max-seconds``, then evaluated and saved as usual) in a
child process, which reports its own peak RSS (VmHWM) as it exits. The budget is
1.5 x (model and optimizer + one padded id matrix for every row + 300 MB): model and
optimizer are weights, gradients and AdamW's two moments, 16 bytes a parameter; the matrix
is int32. ``--pythonpath`` runs another checkout's training code on the same corpus (to
measure the code before a change).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from bench import sections
from bench.training.long_texts import write_jsonl

MB = 1024 * 1024
BASE_MB = 300
HEADROOM = 1.5
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


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass  # the process has just exited
    return 0.0


def run_training(args: list[str], env: dict[str, str], timeout: float, work: Path) -> dict[str, object]:
    """Run the training CLI with ``args``: its peak RSS, an RSS timeline, and whether it timed out."""
    samples: list[tuple[float, float]] = []
    report = work / "peak-kib.txt"
    report.unlink(missing_ok=True)
    command = [sys.executable, "-c", RUN_AND_REPORT_PEAK, str(report), *args]
    start = time.monotonic()
    with open(work / "train.log", "w") as out:
        child = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.5):
                samples.append((round(time.monotonic() - start, 1), round(_rss_mb(child.pid), 1)))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            status = child.wait(timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGINT)  # KeyboardInterrupt: the child reports its peak on the way out
            try:
                status = child.wait(60)
            except subprocess.TimeoutExpired:
                child.kill()
                status = child.wait()
            timed_out = True
        except BaseException:  # Ctrl-C or SIGTERM: the training run ends with the bench
            child.kill()
            child.wait()
            raise
        done.set()
        sampler.join()
    reported = int(report.read_text()) / 1024 if report.is_file() else math.nan
    sampled = max((rss for _, rss in samples), default=0.0)
    # The kernel updates the high-water mark lazily, so a sample can top it by a page or two.
    return {
        "peak_mb": sampled if math.isnan(reported) else max(reported, sampled),
        "reported_peak_mb": reported,
        "seconds": time.monotonic() - start,
        "exit_status": status,
        "stopped_by_timeout": timed_out,
        "timeline": samples,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = sections.parser("training-memory", __doc__)
    parser.add_argument("--rows", type=int, default=120_000)
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--max-seconds", type=float, default=120.0, help="training budget of the run")
    parser.add_argument("--timeout", type=float, default=3600.0, help="stop the run after this long")
    parser.add_argument("--pythonpath", type=Path, help="prepend to PYTHONPATH of the run")
    parser.add_argument("--work", type=Path, help="folder for the corpus and the run (default: temporary)")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="attnserve-memory-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        data = work / f"long-texts-{args.rows}.jsonl"
        if not data.is_file():
            write_jsonl(data, args.rows)
        command = ["--data", str(data), "--model", "transformer", "--max-len", str(args.max_len)]
        command += ["--epochs", "1", "--max-seconds", str(args.max_seconds), "--no-progress"]
        command += ["--out", str(work / "run")]
        env = dict(os.environ)
        if args.pythonpath is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(args.pythonpath), env.get("PYTHONPATH")]))
        result = run_training(command, env, args.timeout, work)
        metrics_path = work / "run" / "metrics.json"
        params = json.loads(metrics_path.read_text())["params"] if metrics_path.is_file() else None
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
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["exit_status"] == 0 else 1
