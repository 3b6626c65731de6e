"""One training run end to end: data -> tokenizer -> model -> fit -> evaluate -> run directory."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnserve.training import data as datasets
from attnserve.training.checkpoint import EVAL_SET, METRICS, TOKENIZER, save_checkpoint, write_json
from attnserve.training.models import build_model
from attnserve.training.models.base import Classifier
from attnserve.training.plots import plot_attention, plot_curves
from attnserve.training.tokenizer import UNK_ID, build_tokenizer, encode_batch, save_tokenizer
from attnserve.training.trainer import (
    History,
    Split,
    TrainConfig,
    evaluate,
    fit,
    pick_device,
    seed_everything,
)

log = logging.getLogger(__name__)
FILE_SUFFIXES = {".csv", ".json", ".jsonl", ".parquet"}


@dataclass(frozen=True)
class DataSpec:
    task: str = "car-order"
    path: str | None = None  # a CSV/JSONL/Parquet file or a Hugging Face dataset (local dir or hub name)
    text_column: str = "text"
    label_column: str = "label"
    n_pairs: int | None = None  # None: the task's own default
    distractor_prefix: bool = False
    min_frequency: int = 1
    seed: int = 0


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    metrics: dict[str, Any]
    history: History = field(repr=False)


def load_dataset(spec: DataSpec) -> datasets.Dataset:
    if spec.path is None:
        return datasets.load_task(
            spec.task, seed=spec.seed, n_pairs=spec.n_pairs, distractor_prefix=spec.distractor_prefix
        )
    p = Path(spec.path)
    if p.is_file() and p.suffix.lower() in FILE_SUFFIXES:
        ds = datasets.load_file(
            p, text_column=spec.text_column, label_column=spec.label_column, seed=spec.seed
        )
    else:
        ds = datasets.load_hf_dataset(
            spec.path, text_column=spec.text_column, label_column=spec.label_column, seed=spec.seed
        )
    return ds


def _encode(tokenizer: Any, examples: list[datasets.Example], max_len: int) -> Split:
    enc = encode_batch(tokenizer, [e.text for e in examples], max_len)
    labels = np.asarray([e.label for e in examples], dtype=np.int64)
    groups = np.asarray([e.group for e in examples], dtype=np.int64)
    return Split(enc.input_ids, enc.attention_mask, labels, groups)


def _attention_samples(
    model: Classifier, tokenizer: Any, examples: list[datasets.Example], labels: tuple[str, ...], max_len: int
) -> list[tuple[str, list[str], np.ndarray]]:
    if model.attention_kind == "none":
        return []
    device = next(model.parameters()).device
    samples = []
    for ex in examples:
        enc = encode_batch(tokenizer, [ex.text], max_len)
        with torch.no_grad():
            logits, att = model(
                torch.from_numpy(enc.input_ids).to(device), torch.from_numpy(enc.attention_mask).to(device)
            )
        pred = labels[int(logits.argmax(-1))]
        assert att is not None
        samples.append((f"true {labels[ex.label]}\npred {pred}", enc.tokens[0], att[0].cpu().numpy()))
    return samples


def train_run(
    out_dir: str | Path,
    family: str,
    model_overrides: dict[str, Any],
    train_cfg: TrainConfig,
    data_spec: DataSpec,
) -> RunResult:
    run_dir = Path(out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    ds = load_dataset(data_spec)
    add_cls = model_overrides.get("pooling") == "cls"
    tokenizer = build_tokenizer(
        [e.text for e in ds.train], min_frequency=data_spec.min_frequency, add_cls=add_cls
    )
    save_tokenizer(tokenizer, run_dir / TOKENIZER)

    cfg = {"vocab_size": tokenizer.get_vocab_size(), "num_classes": len(ds.labels), **model_overrides}
    seed_everything(train_cfg.seed)  # the initial weights are part of what a seed reproduces
    model = build_model(family, cfg)
    max_len = model.config.max_len
    train, val, test = (_encode(tokenizer, s, max_len) for s in (ds.train, ds.val, ds.test))
    log.info("%s on %s: %d train / %d val / %d test", family, ds.name, len(train), len(val), len(test))

    history = fit(model, train, val, train_cfg, unk_id=UNK_ID, keep_first_token=add_cls)
    device = pick_device(train_cfg.device)
    metrics: dict[str, Any] = {
        "task": ds.name,
        "family": family,
        "labels": list(ds.labels),
        "params": sum(p.numel() for p in model.parameters()),
        "train_seconds": round(history.seconds, 2),
        "best_epoch": history.best_epoch,
        "epochs_run": len(history.epochs),
        "val": evaluate(model, val, device).as_dict(),
        "test": evaluate(model, test, device).as_dict(),
        "history": history.epochs,
    }
    for name, examples in ds.extra.items():
        if examples:
            metrics[name] = evaluate(model, _encode(tokenizer, examples, max_len), device).as_dict()

    model.cpu()
    save_checkpoint(run_dir, model, labels=list(ds.labels), task=ds.name, metrics=_summary(metrics))
    write_json(run_dir / METRICS, metrics)
    with open(run_dir / EVAL_SET, "w") as fh:
        for ex in ds.val:
            fh.write(json.dumps({"text": ex.text, "label": ex.label}) + "\n")
    title = f"{family} on {ds.name}"
    plot_curves(history.epochs, run_dir / "curves.png", title)
    plot_attention(
        _attention_samples(model, tokenizer, ds.test[:3], ds.labels, max_len),
        run_dir / "attention.png",
        title,
    )
    return RunResult(run_dir, metrics, history)


def _summary(metrics: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint keeps the headline figures; the per-epoch history stays in metrics.json."""
    return {k: v for k, v in metrics.items() if k != "history"}
