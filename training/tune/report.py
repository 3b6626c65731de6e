"""The record of a search: a markdown table of every trial and a plot of their scores."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: runs in CI and containers without a display
import matplotlib.pyplot as plt

from attnserve.training.tune.space import TrialSettings


@dataclass(frozen=True)
class TrialRow:
    number: int
    state: str  # complete | pruned
    settings: TrialSettings
    value: float  # the validation score: final (complete) or at the epoch it was pruned
    seconds: float


def _settings(s: TrialSettings) -> str:
    values = {**s.model, **s.training}
    shown = (f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(values.items()))
    return ", ".join(shown)


def write_table(path: Path, rows: Sequence[TrialRow], metric: str, best: int) -> Path:
    lines = [
        f"| trial | state | family | validation {metric} | seconds | settings |",
        "|---:|---|---|---:|---:|---|",
    ]
    for r in sorted(rows, key=lambda r: r.number):
        mark = " (best)" if r.number == best else ""
        lines.append(
            f"| {r.number}{mark} | {r.state} | {r.settings.family} | {r.value:.4f} | {r.seconds:.0f} | "
            f"{_settings(r.settings)} |"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def write_plot(path: Path, rows: Sequence[TrialRow], metric: str) -> Path:
    """Each trial's score by trial number, one colour per family; the best so far as a line."""
    fig, ax = plt.subplots(figsize=(10, 4))
    families = sorted({r.settings.family for r in rows})
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, family in enumerate(families):
        for state, marker in (("complete", "o"), ("pruned", "x")):
            chosen = [r for r in rows if r.settings.family == family and r.state == state]
            if chosen:
                label = family if state == "complete" else f"{family} (pruned)"
                xs_, ys_ = [r.number for r in chosen], [r.value for r in chosen]
                ax.scatter(xs_, ys_, marker=marker, color=colours[i % len(colours)], label=label)
    ordered = sorted((r for r in rows if r.state == "complete"), key=lambda r: r.number)
    best, xs, ys = float("-inf"), [], []
    for r in ordered:
        best = max(best, r.value)
        xs.append(r.number)
        ys.append(best)
    if xs:
        last = max(r.number for r in rows)  # the line runs on past the later, pruned trials
        ax.step([*xs, last], [*ys, ys[-1]], where="post", color="black", linewidth=1, label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel(f"validation {metric}")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))  # beside: never over a trial
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
