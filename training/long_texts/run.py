"""`attnserve-train --long-texts windows`: one run end to end on long texts.

The run starts as any run does (training/run/start.py: a tokenizer learnt on the texts or a
checkpoint's own, max_len set, auto or the family's), writes its tokenizer, then cuts every
text into the windows a server would cut (windows.py), trains on whole texts (loop.py),
reads validation as truncate, mean and max (fold.py) and records the best of mean and max,
with every figure, as the policy in `long_texts.json`. The run folder is an ordinary run
(checkpoint.pt, tokenizer.json, metrics.json, report.json, eval.jsonl, test.jsonl), so
`attnserve-export RUN` exports it, with that policy.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import resource
import time
from pathlib import Path
from typing import Any

from attnserve.service.bundle import softmax
from attnserve.training.cli.exits import UsageError
from attnserve.training.data.spec import DataSpec, load_dataset
from attnserve.training.document.head import TRUNCATE
from attnserve.training.long_texts.fold import READINGS, choose, readings
from attnserve.training.long_texts.loop import LongHistory, Windows, fit_long
from attnserve.training.long_texts.record import write_policy
from attnserve.training.long_texts.settings import LongTextSettings
from attnserve.training.long_texts.windows import Documents, documents, window_tokenizer
from attnserve.training.loop import distributed
from attnserve.training.loop.trainer import TrainConfig, pick_device, seed_everything
from attnserve.training.models import REGISTRY
from attnserve.training.report.data import DataReport, check_classes, check_lengths
from attnserve.training.report.metrics import class_report
from attnserve.training.report.plots import plot_confusion
from attnserve.training.run.checkpoint import METRICS, TEST_SET, TOKENIZER, save_checkpoint, write_json
from attnserve.training.run.outputs import CONFUSION_PNG, REPORT, write_eval_set
from attnserve.training.run.prepare import resolve_max_len
from attnserve.training.run.start import start_for
from attnserve.training.text.tokenizer import UNK_ID, token_lengths

log = logging.getLogger(__name__)


def train_long_run(
    out_dir: str | Path,
    family: str,
    overrides: dict[str, Any],
    cfg: TrainConfig,
    spec: DataSpec,
    settings: LongTextSettings,
    *,
    pretrained: str | None = None,
) -> dict[str, Any]:
    """Train `family` on `spec`'s long texts into `out_dir`; its metrics."""
    if distributed.launched():
        raise UsageError("--long-texts windows trains in one process; run it without torchrun")
    device = pick_device(cfg.device)
    run_dir = Path(out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if settings.window is not None and spec.max_len is None and "max_len" not in overrides:
        spec = dataclasses.replace(spec, max_len=settings.window)  # the model reads one window at a time
    start = start_for(
        REGISTRY[family],
        pretrained,
        spec,
        add_cls=overrides.get("pooling") == "cls",
        at=distributed.ranks(),
        embeddings=None,
    )
    ds = load_dataset(spec)
    if ds.multi_label:
        raise UsageError("--long-texts windows trains one label per text; this data is multi-label")
    tokenizer = start.tokenizer([e.text for e in ds.train])
    parts = {"train": ds.train, "val": ds.val, "test": ds.test, **ds.extra}
    parts = {k: v for k, v in parts.items() if v or k == "val"}
    lengths = {k: token_lengths(tokenizer, [e.text for e in v]) for k, v in parts.items() if v}
    max_len, how = resolve_max_len(spec, family, overrides, lengths, start.max_positions)
    policy = settings.policy(max_len)
    report = DataReport()  # lengths and classes: the bundle's drift reference (export/profile.py)
    check_lengths(report, lengths, max_len, spec.truncation, how)
    report.warnings.clear()  # they warn of texts cut at max_len: here every window is read
    check_classes(report, ds.labels, [e.label for e in ds.train], cfg.class_weights != "none")
    log.info(
        "max_len %d (%s): windows of %d tokens sharing %d, at most %d a text",
        max_len,
        how,
        policy.window,
        policy.stride,
        policy.max_windows,
    )
    start.save(tokenizer, run_dir / TOKENIZER, max_len, spec.truncation)
    write_eval_set(run_dir, ds.val)
    write_eval_set(run_dir, ds.test, TEST_SET)
    seed_everything(cfg.seed)
    model, _ = start.build(family, len(ds.labels), max_len, overrides, tokenizer)
    cutter = window_tokenizer(run_dir / TOKENIZER, max_len, spec.truncation, policy)
    cut_started = time.perf_counter()
    docs = {
        k: documents(
            cutter, [e.text for e in v], [e.label for e in v], policy.max_windows, int(model.config.pad_id)
        )
        for k, v in parts.items()
    }
    warnings = _skipped(docs, policy.max_windows)
    log.info(
        "cut into windows in %.1f s: %s",
        time.perf_counter() - cut_started,
        ", ".join(f"{k} {len(d):,} texts / {len(d.lengths):,} windows" for k, d in docs.items()),
    )
    for warning in warnings:  # skipped texts: said before the training they are left out of
        log.warning("%s", warning)
    if not len(docs["train"]) or not len(docs["val"]):
        raise UsageError(f"no training or validation text fits --max-windows {policy.max_windows}: raise it")
    unk = tokenizer.token_to_id("[UNK]")
    loop = Windows(
        policy,
        settings.budget(cfg.batch_size, policy.window),
        UNK_ID if unk is None else unk,
        frozenset(cutter.special_ids),
    )
    cpu_started = time.process_time()
    history = fit_long(model, docs["train"], docs["val"], cfg, loop, device)
    cpu_seconds = time.process_time() - cpu_started
    read = {
        k: readings(model, d, policy, device, cfg.max_batch_tokens or loop.budget)
        for k, d in docs.items()
        if k != "train"
    }
    scored = {k: figures for k, (figures, _) in read.items()}
    chosen = {name: scored["val"][name].accuracy for name in READINGS}
    pick = choose(chosen)
    if chosen[TRUNCATE] > chosen[pick]:
        warnings.append(
            f"the first window alone scored {chosen[TRUNCATE]:.4f} on validation, over {pick}'s "
            f"{chosen[pick]:.4f}: these texts may be decided by their start"
        )
        log.warning("%s", warnings[-1])
    final = policy.model_copy(update={"combine": pick, "chosen": chosen})
    metrics = _metrics(ds.name, family, list(ds.labels), ds.ordered, start.label, model, history, cfg, spec)
    metrics |= {k: s[pick].as_dict() for k, s in scored.items() if s}
    metrics["train_cpu_seconds"] = round(cpu_seconds, 2)
    metrics["warnings"] = report.warnings + warnings
    metrics["data"] = report.figures
    metrics["long_texts"] = {
        "policy": final.model_dump(mode="json"),
        "max_len": {"value": max_len, "how": how},
        "readings": {k: {name: s.accuracy for name, s in v.items()} for k, v in scored.items()},
        "texts": {
            k: {"texts": len(d), "windows": len(d.lengths), "skipped": d.skipped} for k, d in docs.items()
        },
        "step_tokens": loop.budget,
    }
    reports = {
        k: class_report(docs[k].labels, softmax(folded[pick]), list(ds.labels), ordered=ds.ordered)
        for k, (_, folded) in read.items()
        if folded
    }
    _write(run_dir, model, list(ds.labels), ds.name, spec.truncation, metrics, reports)
    write_policy(run_dir, final)
    return metrics


def _skipped(docs: dict[str, Documents], max_windows: int) -> list[str]:
    return [
        f"{k}: {d.skipped} of {len(d) + d.skipped} texts skipped (no tokens, or over {max_windows} "
        "windows, which a server refuses)"
        for k, d in docs.items()
        if d.skipped
    ]


def _metrics(
    task: str,
    family: str,
    labels: list[str],
    ordered: bool,
    tokenizer: str,
    model: Any,
    history: LongHistory,
    cfg: TrainConfig,
    spec: DataSpec,
) -> dict[str, Any]:
    return {
        "task": task,
        "family": family,
        "labels": labels,
        "ordered_labels": ordered,
        "multi_label": False,
        "params": sum(p.numel() for p in model.parameters()),
        "tokenizer": tokenizer,
        "processes": 1,
        "train_seconds": round(history.seconds, 2),
        "best_epoch": history.best_epoch,
        "epochs_run": len({row["epoch"] for row in history.epochs}),
        "validations": len(history.epochs),
        "steps": history.steps,
        "out_of_time": history.out_of_time,
        "seeds": {"data": spec.seed, "weights": cfg.seed},
        "select_by": cfg.select_by,
        "class_weights": cfg.class_weights,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "history": history.epochs,
    }


def _write(
    run_dir: Path,
    model: Any,
    labels: list[str],
    task: str,
    truncation: str,
    metrics: dict[str, Any],
    reports: dict[str, Any],
) -> None:
    """checkpoint.pt, metrics.json and report.json (per split, the chosen reading's class report)."""
    model.cpu()
    summary = {k: v for k, v in metrics.items() if k != "history"}
    save_checkpoint(run_dir, model, labels=labels, task=task, metrics=summary, truncation=truncation)
    write_json(run_dir / METRICS, metrics)
    write_json(run_dir / REPORT, reports)
    shown = {k: v for k, v in reports.items() if k != "val"} or reports
    plot_confusion(shown, run_dir / CONFUSION_PNG, f"{metrics['family']} on {task}, long texts")
