"""The markdown page `attnserve-train compare` writes: a summary table, computed findings,
and each run's per-class report and confusion matrix (test split)."""

from __future__ import annotations

import math
import os
import platform
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnserve.training.data import DEFAULTS
from attnserve.training.models import FAMILIES

MEAN_POOL = "mean_pool"


@dataclass(frozen=True)
class RunSpec:
    family: str
    settings: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        return self.family + "".join(f" {k}={v}" for k, v in self.settings)

    @property
    def slug(self) -> str:
        return self.family + "".join(f"-{v}" for _, v in self.settings)


@dataclass(frozen=True)
class Run:
    spec: RunSpec
    distractor: bool
    seed: int
    metrics: dict[str, Any]
    report: dict[str, Any]
    run_dir: Path


def _figure(values: list[float], digits: int = 3) -> str:
    """One run: its value; several: mean (worst)."""
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.fmean(values):.{digits}f} ({min(values):.{digits}f})"


def _groups(runs: Sequence[Run]) -> dict[tuple[str, bool], list[Run]]:
    groups: dict[tuple[str, bool], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.spec.label, run.distractor), []).append(run)
    return groups


def _summary(runs: Sequence[Run]) -> list[str]:
    first = runs[0].metrics
    ordered = bool(first.get("ordered_labels"))
    extra = [k for k in runs[0].report if k not in ("val", "test")]  # e.g. car-order's held-out templates
    variants = len({r.distractor for r in runs}) > 1
    columns = ["family", *(["distractor"] if variants else []), "test accuracy", "test macro-F1"]
    columns += ["test MAE"] if ordered else []
    columns += [f"{split.replace('_', ' ')} accuracy" for split in extra]
    columns += ["params", "train time, s (CPU s)", "epochs (best)", "peak memory (MB)"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for (label, distractor), group in _groups(runs).items():

        def of(get: Callable[[dict[str, Any]], float], group: list[Run] = group) -> list[float]:
            return [get(r.metrics) for r in group]

        cells = [f"`{label}`", *(["yes" if distractor else "no"] if variants else [])]
        cells += [_figure(of(lambda m: m["test"]["accuracy"])), _figure(of(lambda m: m["test"]["macro_f1"]))]
        cells += [_figure(of(lambda m: m["test"]["mae"]))] if ordered else []
        cells += [_figure([r.metrics[split]["accuracy"] for r in group]) for split in extra]
        epochs = "/".join(f"{r.metrics['epochs_run']} ({r.metrics['best_epoch']})" for r in group)
        seconds = statistics.fmean(of(lambda m: m["train_seconds"]))
        cpu = [r.metrics["train_cpu_seconds"] for r in group if "train_cpu_seconds" in r.metrics]
        cpu_text = f" ({statistics.fmean(cpu):.0f})" if cpu else ""
        cells += [f"{group[0].metrics['params']:,}", f"{seconds:.0f}{cpu_text}"]
        cells += [epochs, f"{max(of(lambda m: m['peak_rss_mb'])):.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _verdict(delta: float, p1: float, p2: float, n: int) -> str:
    """Whether a difference in accuracy is beyond two standard errors of the difference."""
    error = 2 * math.sqrt((p1 * (1 - p1) + p2 * (1 - p2)) / max(n, 1))
    if abs(delta) <= error:
        return f"makes no clear difference (within two standard errors, {error:.3f})"
    return f"{'helps' if delta > 0 else 'hurts'} (beyond two standard errors, {error:.3f})"


def _findings(runs: Sequence[Run]) -> list[str]:
    """Each family against mean pooling, per variant, and what the distractor costs each family."""
    acc = {
        key: statistics.fmean(r.metrics["test"]["accuracy"] for r in g) for key, g in _groups(runs).items()
    }
    n = int(runs[0].metrics["test"]["n"]) * len({r.seed for r in runs})
    # bow_mlp has no attention to credit: its line says what differs, the family itself.
    attends = {r.spec.label: FAMILIES[r.spec.family].attention_kind != "none" for r in runs}
    lines = []
    for distractor in sorted({d for _, d in acc}):
        base = next((v for (label, d), v in acc.items() if d == distractor and label == MEAN_POOL), None)
        if base is None:
            continue
        variant = "with the distractor prefix" if distractor else "without the distractor prefix"
        for (label, d), value in acc.items():
            if d != distractor or label == MEAN_POOL:
                continue
            delta = value - base
            verdict = _verdict(delta, value, base, n)
            subject = "attention" if attends[label] else f"`{label}` (no attention)"
            lines.append(
                f"- {variant}: `{label}` {value:.3f} vs `mean_pool` {base:.3f} ({delta:+.3f}): "
                f"{subject} {verdict}."
            )
    for (label, d), value in acc.items():
        if d and (label, False) in acc:
            lines.append(f"- the distractor costs `{label}` {acc[(label, False)] - value:.3f} accuracy.")
    return lines


def _details(run: Run) -> list[str]:
    test = run.report.get("test") or run.report["val"]
    names = test["labels"]
    variant = " with distractor" if run.distractor else ""
    lines = [f"### `{run.spec.label}`{variant} (seed {run.seed})", ""]
    lines += ["| class | precision | recall | F1 | support | predicted |", "|---|---|---|---|---|---|"]
    for name in names:
        c = test["per_class"][name]
        figures = [f"{c[k]:.3f}" for k in ("precision", "recall", "f1")] + [
            str(c["support"]),
            str(c["predicted"]),
        ]
        lines.append(f"| {name} | " + " | ".join(figures) + " |")
    lines += ["", "Confusion matrix (rows: true class, columns: predicted):", ""]
    lines += ["| true \\ predicted | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    lines += [
        f"| {name} | " + " | ".join(str(v) for v in row) + " |"
        for name, row in zip(names, test["confusion"], strict=True)
    ]
    return [*lines, ""]


def _setup(runs: Sequence[Run], task: str) -> str:
    data = runs[0].metrics["data"]
    lengths = data["lengths"]
    order = ["train", "val", "test", *sorted(set(lengths) - {"train", "val", "test"})]
    sizes = ", ".join(f"{lengths[split]['n']:,} {split}" for split in order if split in lengths)
    rows = sum(lengths[s]["n"] for s in ("train", "val", "test") if s in lengths)
    full = DEFAULTS[task].size if task in DEFAULTS and task.startswith("reviews") else None
    size = ""
    if full is not None:
        size = (
            f"**Size: {rows:,} reviews, the task's full size.** "
            if rows >= full
            else f"**Size: {rows:,} reviews, not the full {full:,}** (`--size`). "
        )
    distracted = next((r.metrics["data"]["lengths"]["train"] for r in runs if r.distractor), None)
    with_prefix = (
        ""
        if distracted is None or runs[0].distractor
        else f" (with the distractor prefix: mean {distracted['mean']}, {distracted['truncated_share']:.1%} "
        "truncated)"
    )
    return (
        f"{size}Data: {sizes}; max_len {data['max_len']} ({data['max_len_from']}), keeping the "
        f"{data['truncation']} of longer texts; tokens per training text: mean {lengths['train']['mean']}, "
        f"p95 {lengths['train']['p95']}, {lengths['train']['truncated_share']:.1%} truncated{with_prefix}."
    )


def write_page(path: Path, task: str, runs: Sequence[Run], command: str, budget: str | None = None) -> None:
    # Train times are wall-clock: say how busy the machine was while the runs trained.
    loads = [r.metrics["load_average"][2] for r in runs if "load_average" in r.metrics]
    busy = (
        f"15-minute load average {min(loads):.1f}-{max(loads):.1f} at the ends of the runs"
        if loads
        else "load average during the runs not recorded"
    )
    machine = f"{platform.machine()}, {os.cpu_count()} cores, {busy}"
    seeds = sorted({r.seed for r in runs})
    text = [
        f"# {task}: families side by side",
        "",
        f"Produced by `{command}` on {machine}. {_setup(runs, task)}",
        *(
            [
                f"Each run had a wall-clock budget of {budget} s (`--max-seconds`, checked between "
                "steps): the epochs column counts the epochs completed, and a run stopped by it "
                "keeps its best completed epoch, so it is under-trained, not at its best."
            ]
            if budget
            else []
        ),
        "Figures are on the test split"
        + (f", mean (worst) over seeds {seeds}" if len(seeds) > 1 else "")
        + ".",
        "",
        *_summary(runs),
        "",
        "## Findings (computed from the table)",
        "",
        *(_findings(runs) or ["- no `mean_pool` run to compare against."]),
        "",
        *(
            [
                "What the figures mean and what they leave open: [reviews-findings.md](reviews-findings.md).",
                "",
            ]
            if task.startswith("reviews")
            else []
        ),
        "## Per-class reports and confusion matrices (test split)",
        "",
    ]
    for run in runs:
        if run.seed == seeds[0]:
            text += _details(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(text).rstrip() + "\n")
