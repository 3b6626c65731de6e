"""`attnserve-train compare`: several families on one task, side by side, as a markdown page.

Same data, same seed, same trainer; only the family (and its config) changes, so the page
shows what attention buys. Each run is its own `attnserve-train` process, so its peak
memory is its own. With ``--distractor both`` every family also trains on texts prefixed
by another text of the same split. Flags this command does not know (``--size``,
``--max-len``, ``--truncation``, ``--max-seconds``, ...) are passed to every run.

    attnserve-train compare --task car-order --seeds 0 1 2 3
    attnserve-train compare --task reviews-polarity --distractor both --max-seconds 900
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from attnserve.training.cli.exits import UsageError
from attnserve.training.data import TASKS
from attnserve.training.models import FAMILIES
from attnserve.training.report.comparison import Run, RunSpec, write_page

# A family, optionally with config fields: "attention_pool:positions=sinusoidal".
DEFAULT_FAMILIES = {
    "car-order": ("transformer", "self_attention", "attention_pool", "mean_pool", "bow_mlp"),
    "reviews": ("mean_pool", "attention_pool:positions=sinusoidal", "self_attention", "transformer"),
}
DEFAULT_TABLES = {"car-order": "docs/results/car-order.md", "reviews": "docs/results/reviews.md"}
COMMAND_RECORD = "compare.json"  # the training command a finished run came from


def parse_family(text: str) -> RunSpec:
    family, _, rest = text.partition(":")
    if family not in FAMILIES:
        raise UsageError(f"unknown family {family!r} in {text!r}; families: {', '.join(sorted(FAMILIES))}")
    settings = []
    for item in filter(None, rest.split(",")):
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(
                f"{text!r}: write config fields as name=value, e.g. attention_pool:positions=sinusoidal"
            )
        settings.append((name.strip(), value.strip()))
    return RunSpec(family, tuple(settings))


def _command(
    task: str, spec: RunSpec, out: Path, seed: int, distractor: bool, passed: list[str]
) -> list[str]:
    cmd = [sys.executable, "-m", "attnserve.training.cli", "--task", task, "--model", spec.family]
    cmd += ["--out", str(out), "--seed", str(seed), *passed]
    for name, value in spec.settings:
        cmd += ["--" + name.replace("_", "-"), value]
    return cmd + (["--distractor-prefix"] if distractor else [])


def _train(cmd: list[str], out: Path, console: Console, reuse: bool) -> dict[str, Any]:
    """Run one training process (output in OUT/train.log), or reuse a finished identical one."""
    record = out / COMMAND_RECORD
    args = cmd[1:]  # which interpreter ran it does not change the run
    if reuse and record.is_file() and json.loads(record.read_text()) == args:
        console.print("  reusing the finished run there")
    else:
        out.mkdir(parents=True, exist_ok=True)
        record.unlink(missing_ok=True)
        with open(out / "train.log", "w") as log:
            code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
        if code != 0:
            tail = (out / "train.log").read_text().strip().splitlines()[-1:] or ["(no output)"]
            raise UsageError(f"training {out} failed with exit status {code}: {tail[0]}")
        record.write_text(json.dumps(args))
    metrics: dict[str, Any] = json.loads((out / "metrics.json").read_text())
    console.print(
        f"  done: test accuracy {metrics['test']['accuracy']:.4f} in {metrics['train_seconds']:.0f}s"
    )
    return metrics


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="attnserve-train compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--task", default="car-order", choices=TASKS, help="built-in task (default: car-order)")
    p.add_argument(
        "--out", default=None, help="one run directory per run goes here (default: runs/compare-TASK)"
    )
    p.add_argument(
        "--table",
        default=None,
        help="markdown page to write (default: docs/results/car-order.md or docs/results/reviews.md)",
    )
    p.add_argument(
        "--seeds", nargs="+", type=int, default=[0], help="one run per family and seed (default: 0)"
    )
    p.add_argument(
        "--families",
        nargs="+",
        default=None,
        metavar="FAMILY[:FIELD=VALUE,...]",
        help="families to train (default: every family for car-order; mean_pool, "
        "attention_pool:positions=sinusoidal, self_attention, transformer for reviews-*)",
    )
    p.add_argument(
        "--distractor",
        choices=("off", "on", "both"),
        default="off",
        help="train without, with, or both without and with the distractor prefix (default: off)",
    )
    p.add_argument(
        "--reuse-runs",
        action="store_true",
        help="keep runs under --out that finished with the same command (resume a comparison, or "
        "assemble one page from variants trained side by side)",
    )
    ns, passed = p.parse_known_args(argv)
    kind = "reviews" if ns.task.startswith("reviews") else "car-order"
    specs = [parse_family(f) for f in (ns.families or DEFAULT_FAMILIES[kind])]
    out_root = Path(ns.out or f"runs/compare-{ns.task}")
    table = Path(ns.table or DEFAULT_TABLES[kind])
    variants = {"off": [False], "on": [True], "both": [False, True]}[ns.distractor]

    console = Console()
    runs = []
    for distractor in variants:
        for spec in specs:
            for seed in ns.seeds:
                out = out_root / (spec.slug + ("+distractor" if distractor else "")) / f"seed{seed}"
                console.print(
                    f"[bold]training {spec.label}[/bold]{' with distractor' if distractor else ''} "
                    f"(seed {seed}) -> {out}"
                )
                command = _command(ns.task, spec, out, seed, distractor, passed)
                metrics = _train(command, out, console, ns.reuse_runs)
                report = json.loads((out / "report.json").read_text())
                runs.append(Run(spec, distractor, seed, metrics, report, out))
    given = sys.argv[2:] if argv is None else list(argv)
    budget = passed[passed.index("--max-seconds") + 1] if "--max-seconds" in passed[:-1] else None
    write_page(table, ns.task, runs, "attnserve-train compare " + shlex.join(given), budget)
    console.print(f"page written to {table}")
    return 0
