"""One training run end to end: prepare (data, tokenizer, encoded splits) -> build (the plan,
the model) -> fit -> write (evaluation, run directory).

The family says where the run starts from (training/run/start.py): a tokenizer learnt on the
data, or a pretrained checkpoint's own tokenizer and weights. Under torchrun every
rank reads the same data and trains its share; rank 0 alone builds the tokenizer (sent to the
others over the process group, so no rank reads another's disk) and writes the run directory.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from attnserve.training.data.recipe import DataRecipe
from attnserve.training.data.spec import DataSpec as DataSpec  # re-exported: the run's data settings
from attnserve.training.data.spec import load_dataset as load_dataset  # re-exported
from attnserve.training.distill.student import DistillSpec
from attnserve.training.loop import distributed
from attnserve.training.loop.memory import bound_kernel_cache, release_unused_memory
from attnserve.training.loop.resume import RESUME
from attnserve.training.loop.trainer import History, TrainConfig, fit, pick_device, seed_everything
from attnserve.training.models import REGISTRY
from attnserve.training.models.base import Classifier
from attnserve.training.models.families import Family, FamilyError
from attnserve.training.run.outputs import Evaluation, evaluate_splits, write_run
from attnserve.training.run.prepare import Prepared, prepare
from attnserve.training.run.prepare import encode as encode  # re-exported: one split's ids
from attnserve.training.run.start import Start, start_for
from attnserve.training.text.embeddings import EmbeddingInit
from attnserve.training.text.tokenizer import UNK_ID

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    metrics: dict[str, Any]
    history: History = field(repr=False)


def train_run(
    out_dir: str | Path,
    family: str,
    model_overrides: dict[str, Any],
    train_cfg: TrainConfig,
    data_spec: DataSpec,
    *,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
    embeddings: EmbeddingInit | None = None,
    recipe: DataRecipe | None = None,
    distill: DistillSpec | None = None,
    pretrained: str | None = None,
) -> RunResult:
    """Train one run into ``out_dir``. ``recipe``: plan the trainer and model from the data's size
    (--data); ``distill``: learn a teacher run's logits too (attnserve-train distill);
    ``pretrained``: the checkpoint to fine-tune, for a family that starts from one."""
    bound_kernel_cache()  # before the first step of the process, or it has no effect
    at = distributed.start(pick_device(train_cfg.device))
    run_dir = Path(out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    add_cls = model_overrides.get("pooling") == "cls"
    parts = _family(family)
    start = start_for(parts, pretrained, data_spec, add_cls=add_cls, at=at, embeddings=embeddings)
    data = prepare(run_dir, start, parts, model_overrides, data_spec, train_cfg, distill, at)
    planned = None
    if recipe is not None:
        train_cfg, model_overrides, planned = recipe.apply(
            train_cfg, family, model_overrides, len(data.splits["train"]), len(data.ds.labels)
        )
        log.info("plan for %d training rows: %s", len(data.splits["train"]), planned)
    model = build(start, data, family, model_overrides, train_cfg.seed)
    # Only rank 0 writes the run (and has the file): the others need no tokenizer from here on.
    written = start.reload(run_dir / "tokenizer.json") if at.main else None
    cpu_start = time.process_time()  # wall time alone misleads on a shared machine
    history = fit(
        model,
        data.splits["train"],
        data.splits["val"],
        train_cfg,
        unk_id=UNK_ID,
        keep_first_token=add_cls,
        state_path=run_dir / RESUME,
        on_epoch=on_epoch,
        distill=None if distill is None else distill.loss,
    )
    cpu_seconds = time.process_time() - cpu_start
    if not at.main:  # rank 0 evaluates and writes the run directory
        distributed.barrier()
        return RunResult(run_dir, {}, history)
    assert written is not None
    facts = {"family": family, "tokenizer": start.label, "processes": at.world,
             "train_cpu_seconds": round(cpu_seconds, 2), "plan": planned}  # fmt: skip
    metrics = write(run_dir, model, written, data, history, train_cfg, data_spec, facts)
    distributed.barrier()
    return RunResult(run_dir, metrics, history)


def build(start: Start, data: Prepared, family: str, overrides: dict[str, Any], seed: int) -> Classifier:
    """The model with its initial weights (part of what a seed reproduces); then the tokenizer,
    learnt among the texts, is let go."""
    seed_everything(seed)
    assert data.tokenizer is not None
    model, figures = start.build(family, len(data.ds.labels), data.max_len, overrides, data.tokenizer)
    data.report.figures |= figures
    data.tokenizer = None
    release_unused_memory()
    return model


def write(
    run_dir: Path,
    model: Classifier,
    tokenizer: Tokenizer,
    data: Prepared,
    history: History,
    train_cfg: TrainConfig,
    spec: DataSpec,
    facts: dict[str, Any],
) -> dict[str, Any]:
    """Evaluate the trained model and write the run directory (rank 0); its metrics.
    ``facts``: family, tokenizer, processes, CPU seconds and plan, from the run itself."""
    release_unused_memory()  # the last steps' activations: evaluation and pictures need far less
    ds, report = data.ds, data.report
    evaluated_splits = {k: s for k, s in data.splits.items() if k != "train"}
    evaluation: Evaluation = evaluate_splits(model, evaluated_splits, ds.labels, ds.ordered,
                                             pick_device(train_cfg.device), train_cfg.max_batch_tokens,
                                             history.epochs)  # fmt: skip
    for warning in evaluation.warnings:
        log.warning("%s", warning)
    planned = facts["plan"]
    metrics: dict[str, Any] = {
        "task": ds.name,
        "family": facts["family"],
        "labels": list(ds.labels),
        "ordered_labels": ds.ordered,
        "multi_label": ds.multi_label,  # a sigmoid per label: micro/macro-F1 and exact match, no accuracy
        "params": sum(p.numel() for p in model.parameters()),
        "tokenizer": facts["tokenizer"],
        "processes": facts["processes"],  # torchrun's ranks (1 without it); a step took batch_size on each
        "train_seconds": round(history.seconds, 2),
        "train_cpu_seconds": facts["train_cpu_seconds"],
        "best_epoch": history.best_epoch,
        "epochs_run": len({row["epoch"] for row in history.epochs}),
        "validations": len(history.epochs),  # one an epoch, more with eval_every
        "out_of_time": history.out_of_time,
        "seeds": {"data": spec.seed, "weights": train_cfg.seed},  # --data-seed, --seed
        "select_by": train_cfg.select_by,
        "class_weights": train_cfg.class_weights,
        **evaluation.scores,
        "data": report.figures,
        "warnings": report.warnings + evaluation.warnings,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],  # how shared the machine was
        "history": history.epochs,
    }
    if data.teacher is not None:
        metrics["teacher"] = data.teacher
    if planned is not None:
        metrics["plan"] = dataclasses.asdict(planned)
    write_run(run_dir, model, tokenizer, ds, metrics, evaluation, history, data.truncation, data.samples)
    if not history.out_of_time:  # complete: nothing left to resume
        (run_dir / RESUME).unlink(missing_ok=True)
    return metrics


def _family(name: str) -> Family:
    if name not in REGISTRY:
        raise FamilyError(f"unknown model family {name!r}; known families: {', '.join(REGISTRY)}")
    return REGISTRY[name]
