"""The self-describing run directory: everything later stages need to rebuild a model.

A checkpoint carries its family, config, labels and limits, so `export/` rebuilds the exact
model from the run directory alone and never consults training-time globals or flags.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnserve.training.models import build_model, config_to_dict
from attnserve.training.models.base import Classifier

FORMAT = "attnserve-checkpoint/1"
CHECKPOINT = "checkpoint.pt"
TOKENIZER = "tokenizer.json"
METRICS = "metrics.json"
EVAL_SET = "eval.jsonl"
TEST_SET = "test.jsonl"  # the test split: chose nothing, so export can gate on it


@dataclass(frozen=True)
class LoadedRun:
    model: Classifier
    family: str
    config: dict[str, Any]
    labels: list[str]
    max_len: int
    pad_id: int
    task: str
    metrics: dict[str, Any]
    tokenizer_path: Path
    eval_path: Path | None
    run_dir: Path
    truncation: str = "head"  # which part of a long text the model was trained on
    multi_label: bool = False  # a sigmoid per label (training/data/multi_label.py), not one softmax


def save_checkpoint(
    run_dir: Path,
    model: Classifier,
    *,
    labels: list[str],
    task: str,
    metrics: dict[str, Any],
    truncation: str = "head",
    multi_label: bool = False,
) -> Path:
    cfg = model.config
    path = run_dir / CHECKPOINT
    tmp = path.with_suffix(".tmp")
    torch.save(
        {
            "format": FORMAT,
            "family": model.family,
            "config": config_to_dict(cfg),
            "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
            "labels": list(labels),
            "max_len": cfg.max_len,
            "pad_id": cfg.pad_id,
            "task": task,
            "metrics": metrics,
            "truncation": truncation,
            "multi_label": multi_label,
        },
        tmp,
    )
    tmp.replace(path)  # never leave a half-written checkpoint under the real name
    return path


def load_run(run_dir: str | Path) -> LoadedRun:
    run = Path(run_dir)
    ckpt_path = run / CHECKPOINT
    if not ckpt_path.is_file():
        raise FileNotFoundError(f"{ckpt_path} not found: is {run} a training run directory?")
    tok_path = run / TOKENIZER
    if not tok_path.is_file():
        raise FileNotFoundError(f"{tok_path} not found: the run directory is incomplete")
    ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    if ckpt.get("format") != FORMAT:
        raise ValueError(f"{ckpt_path}: unknown checkpoint format {ckpt.get('format')!r}, expected {FORMAT}")
    model = build_model(ckpt["family"], ckpt["config"])
    model.load_state_dict(ckpt["state_dict"])
    model.eval()
    eval_path = run / EVAL_SET
    return LoadedRun(
        model=model,
        family=ckpt["family"],
        config=ckpt["config"],
        labels=list(ckpt["labels"]),
        max_len=int(ckpt["max_len"]),
        pad_id=int(ckpt["pad_id"]),
        task=str(ckpt["task"]),
        metrics=ckpt["metrics"],
        tokenizer_path=tok_path,
        eval_path=eval_path if eval_path.is_file() else None,
        run_dir=run,
        truncation=str(ckpt.get("truncation", "head")),
        multi_label=bool(ckpt.get("multi_label", False)),  # absent from checkpoints written before it
    )


def write_json(path: Path, payload: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
