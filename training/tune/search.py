"""`attnserve-train tune`: search the family and its main settings on the validation split.

Optuna's TPE sampler proposes each trial; every validation (one an epoch, or one every
--eval-every steps) reports its score, and a trial below the median of the earlier trials at
the same validation is pruned. The search never
reads a test part: trials train on --data and score on its validation part. The best trial's
run directory is copied to OUT/best (an ordinary run: export it, serve it), beside
OUT/trials.md (every trial) and OUT/trials.png.

    attnserve-train tune --data train.csv --val-data dev.csv --trials 30 --max-seconds 3600
    attnserve-train tune --data train.csv --val-data dev.csv --pretrained FOLDER --trials 8

With --pretrained the search fine-tunes that checkpoint: learning rate, batch size and head.

Flags of `attnserve-train` not named here (--text-column, --max-len, --epochs, --seed, ...)
apply to every trial; a setting the search draws overrides the same flag.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import shutil
import time
from pathlib import Path
from typing import Any

import optuna

from attnserve.training.cli.exits import UsageError
from attnserve.training.data.spec import DataSpec
from attnserve.training.loop.config import TrainConfig
from attnserve.training.models import FAMILIES, REGISTRY
from attnserve.training.models.families import check_start
from attnserve.training.run.pipeline import train_run
from attnserve.training.tune.report import TrialRow, write_plot, write_table
from attnserve.training.tune.space import SEARCHED, fine_tuned_families, suggest

log = logging.getLogger(__name__)
METRICS = ("accuracy", "macro_f1")
BEST, TRIALS = "best", "trials"


@dataclasses.dataclass(frozen=True)
class TuneConfig:
    trials: int = 20
    max_seconds: float = 0.0  # the whole search's wall-clock budget; 0 = none
    families: tuple[str, ...] = SEARCHED
    metric: str = "accuracy"  # validation figure maximised and pruned on
    seed: int = 0  # the sampler's
    pretrained: str | None = None  # fine-tune this checkpoint: the search is over its family alone

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise UsageError(f"--trials must be >= 1, got {self.trials}")
        if self.max_seconds < 0:
            raise UsageError(f"--max-seconds must be >= 0, got {self.max_seconds}")
        unknown = [f for f in self.families if f not in FAMILIES]
        if unknown or not self.families:
            raise UsageError(f"unknown families {unknown}; choose among {', '.join(sorted(FAMILIES))}")
        for family in self.families:  # a checkpoint's family and --pretrained go together
            check_start(REGISTRY[family], self.pretrained)
        if self.metric not in METRICS:
            raise UsageError(f"--metric must be one of {', '.join(METRICS)}, got {self.metric!r}")


def add_tune_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("search")
    g.add_argument("--trials", type=int, default=TuneConfig.trials, help="trials to run (default: 20)")
    g.add_argument(
        "--families",
        default=",".join(SEARCHED),
        metavar="A,B,...",
        help=f"families to search (default: {','.join(SEARCHED)})",
    )
    g.add_argument(
        "--metric", choices=METRICS, default=TuneConfig.metric, help="validation figure to maximise"
    )
    g.add_argument("--sampler-seed", type=int, default=0, help="seed of the TPE sampler (default: 0)")


def tune(out_dir: Path, base: TrainConfig, spec: DataSpec, given: dict[str, Any], cfg: TuneConfig) -> Path:
    """Run the search and return OUT/best. ``given``: model flags the user set (kept every trial)."""
    # Trials score on validation only: a test part would be read once per trial.
    spec = dataclasses.replace(spec, test_path=None, test_split=None, test_fraction=0.0)
    out_dir.mkdir(parents=True, exist_ok=True)
    sampler = optuna.samplers.TPESampler(seed=cfg.seed)
    # A trial is compared with the others at the same epoch once three have finished.
    pruner = optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=1)
    study = optuna.create_study(direction="maximize", sampler=sampler, pruner=pruner)
    deadline = time.monotonic() + cfg.max_seconds if cfg.max_seconds else math.inf
    rows: list[TrialRow] = []

    def objective(trial: optuna.Trial) -> float:
        settings = suggest(trial, cfg.families)
        remaining = deadline - time.monotonic()
        training = {**settings.training}
        if math.isfinite(remaining):  # the last trial ends with the search's budget
            training["max_seconds"] = max(remaining, 1.0)
        train_cfg = dataclasses.replace(base, **training)
        run_dir = out_dir / TRIALS / f"{trial.number:03d}"
        model = {**settings.model, **{k: v for k, v in given.items() if k in _fields(settings.family)}}

        reported: list[float] = []

        def report(row: dict[str, Any]) -> None:
            reported.append(float(row[f"val_{cfg.metric}"]))
            trial.report(reported[-1], len(reported))  # validations, several an epoch with eval_every
            if trial.should_prune():
                raise optuna.TrialPruned(f"epoch {row['epoch']}: below the median of earlier trials")

        started = time.monotonic()
        try:
            result = train_run(
                run_dir, settings.family, model, train_cfg, spec, on_epoch=report, pretrained=cfg.pretrained
            )
        except optuna.TrialPruned:
            seconds = time.monotonic() - started
            rows.append(TrialRow(trial.number, "pruned", settings, reported[-1], seconds))
            shutil.rmtree(run_dir, ignore_errors=True)  # a pruned run is half-written
            raise
        value = float(result.metrics["val"][cfg.metric])
        rows.append(TrialRow(trial.number, "complete", settings, value, time.monotonic() - started))
        log.info("trial %d: %s %s = %.4f", trial.number, settings.family, cfg.metric, value)
        return value

    timeout = cfg.max_seconds or None
    study.optimize(objective, n_trials=cfg.trials, timeout=timeout, catch=())
    complete = [r for r in rows if r.state == "complete"]
    if not complete:
        raise UsageError("no trial finished: raise --max-seconds or --trials")
    best = max(complete, key=lambda r: r.value)
    best_dir = out_dir / BEST
    shutil.rmtree(best_dir, ignore_errors=True)
    shutil.copytree(out_dir / TRIALS / f"{best.number:03d}", best_dir)
    write_json(best_dir / "tuned.json", {"trial": best.number, "metric": cfg.metric, "value": best.value,
                                         "family": best.settings.family, "model": best.settings.model,
                                         "training": best.settings.training})  # fmt: skip
    write_table(out_dir / "trials.md", rows, cfg.metric, best.number)
    write_plot(out_dir / "trials.png", rows, cfg.metric)
    return best_dir


def _fields(family: str) -> set[str]:
    return {f.name for f in dataclasses.fields(FAMILIES[family].config_cls)}


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def tune_main(ns: argparse.Namespace, base: TrainConfig, spec: DataSpec, given: dict[str, Any]) -> int:
    """The `tune` subcommand after the shared flags were parsed (see training/cli/main.py)."""
    if spec.path is None:
        raise UsageError("tune searches on your data: give --data (and --val-data or --val-split)")
    if spec.multi_label and ns.metric == "accuracy":
        raise UsageError("--multi-label runs report no accuracy: tune them with --metric macro_f1")
    families = tuple(f.strip() for f in ns.families.split(",") if f.strip())
    pretrained = getattr(ns, "pretrained", None)
    if ns.families == ",".join(SEARCHED):  # --families left as it was: the families --pretrained takes
        families = SEARCHED if pretrained is None else fine_tuned_families()
    cfg = TuneConfig(ns.trials, base.max_seconds, families, ns.metric, ns.sampler_seed, pretrained)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    best = tune(Path(ns.out), dataclasses.replace(base, max_seconds=0.0), spec, given, cfg)
    print(f"best run: {best} (trials: {Path(ns.out) / 'trials.md'}, {Path(ns.out) / 'trials.png'})")
    return 0
