"""One training run end to end: data -> tokenizer -> model -> fit -> evaluate -> run directory.

With ``pretrained`` the tokenizer and the encoder come from a Hugging Face checkpoint
(training/text/pretrained.py) instead of being built from the data. Under torchrun every
rank reads the same data and trains its share; rank 0 alone builds the tokenizer (sent to the
others over the process group, so no rank reads another's disk) and writes the run directory.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import resource
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from attnserve.training import data as datasets
from attnserve.training.data.encoding import encode_texts
from attnserve.training.data.recipe import DataRecipe
from attnserve.training.data.spec import DataSpec as DataSpec  # re-exported: the run's data settings
from attnserve.training.data.spec import load_dataset as load_dataset  # re-exported
from attnserve.training.distill.student import DistillSpec, student_data
from attnserve.training.loop import distributed
from attnserve.training.loop.memory import bound_kernel_cache, release_unused_memory
from attnserve.training.loop.resume import RESUME
from attnserve.training.loop.trainer import History, Split, TrainConfig, fit, pick_device, seed_everything
from attnserve.training.models import FAMILIES, build_model
from attnserve.training.models.base import Classifier
from attnserve.training.report.data import (
    DataReport,
    auto_max_len,
    check_classes,
    check_lengths,
    check_vocabulary,
)
from attnserve.training.run.checkpoint import TEST_SET
from attnserve.training.run.outputs import (
    Evaluation,
    attention_examples,
    evaluate_splits,
    write_eval_set,
    write_run,
)
from attnserve.training.text.embeddings import EmbeddingInit, apply_embeddings, load_vectors
from attnserve.training.text.pretrained import Pretrained, encode_pretrained, load_pretrained
from attnserve.training.text.tokenizer import (
    UNK_ID,
    build_tokenizer,
    load_tokenizer,
    save_tokenizer,
    token_lengths,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    metrics: dict[str, Any]
    history: History = field(repr=False)


def resolve_max_len(
    spec: DataSpec,
    family: str,
    overrides: dict[str, Any],
    lengths: dict[str, np.ndarray],
    positions: int | None = None,
) -> tuple[int, str]:
    """max_len and where it came from: set, auto, a task's or the family's default.

    auto takes a percentile of the training lengths, raised to the longest text of the splits
    the run is judged on (val, test): training on SST-2's short phrases, p95 alone (24 tokens)
    cut a fifth of its test sentences. Batches are padded to their own longest text, so a
    longer max_len costs only where texts are long. ``positions`` (a pretrained encoder's
    position table) caps the result.
    """
    if positions is not None:
        capped = dataclasses.replace(spec, max_len_cap=min(spec.max_len_cap, positions))
        value, how = resolve_max_len(capped, family, overrides, lengths)
        if value > positions:
            raise datasets.DataError(
                f"--max-len {value} exceeds the {positions} positions of the pretrained encoder"
            )
        return value, f"{how} (the encoder has {positions} positions)"
    requested = spec.max_len if spec.max_len is not None else overrides.get("max_len")
    if requested is None and spec.path is not None:
        requested = "auto"
    if requested == "auto":
        value = auto_max_len(lengths["train"], spec.max_len_percentile, spec.max_len_cap)
        judged = [int(v.max()) for k, v in lengths.items() if k != "train" and v.size]
        covering = min(max([value, *judged]), spec.max_len_cap)
        how = f"auto: p{spec.max_len_percentile:g} of training lengths"
        if covering > value:
            how += ", raised to cover the evaluated splits"
        return covering, f"{how}, cap {spec.max_len_cap}"
    if requested is not None:
        return int(requested), "set"
    task_default = datasets.DEFAULTS[spec.task].max_len if spec.task in datasets.DEFAULTS else None
    if task_default is not None:
        return task_default, f"{spec.task} default"
    defaults: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(FAMILIES[family].config_cls)}
    return int(defaults["max_len"]), "model default"


def encode(
    tok: Tokenizer,
    examples: list[datasets.Example],
    max_len: int,
    truncation: str,
    *,
    pretrained: bool = False,
) -> Split:
    """One split as an [N, max_len] int32 id matrix and lengths, encoded a chunk at a time.

    A pretrained tokenizer's texts keep their [CLS] and [SEP] when cut (encode_pretrained).
    """
    texts = [e.text for e in examples]
    enc = (encode_pretrained if pretrained else encode_texts)(tok, texts, max_len, truncation)
    labels = np.fromiter((e.label for e in examples), dtype=np.int64, count=len(examples))
    groups = np.fromiter((e.group for e in examples), dtype=np.int64, count=len(examples))
    return Split(enc.input_ids, enc.lengths, labels, groups)


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
    ``pretrained``: fine-tune that checkpoint (family ``encoder``)."""
    bound_kernel_cache()  # before the first step of the process, or it has no effect
    at = distributed.start(pick_device(train_cfg.device))
    run_dir = Path(out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    source = _pretrained(family, pretrained)
    ds = load_dataset(data_spec)
    add_cls = model_overrides.get("pooling") == "cls"
    train_texts = [e.text for e in ds.train]
    tokenizer = source.tokenizer if source is not None else _tokenizer(train_texts, data_spec, add_cls, at)
    evaluated = {"val": ds.val, "test": ds.test, **ds.extra}
    lengths = {"train": token_lengths(tokenizer, train_texts)}
    lengths |= {k: token_lengths(tokenizer, [e.text for e in v]) for k, v in evaluated.items() if v}
    positions = None if source is None else source.max_positions
    max_len, how = resolve_max_len(data_spec, family, model_overrides, lengths, positions)
    truncation = data_spec.truncation

    report = DataReport()
    check_lengths(report, lengths, max_len, truncation, how)
    ours = source is not None
    splits = {"train": encode(tokenizer, ds.train, max_len, truncation, pretrained=ours)}
    splits |= {
        k: encode(tokenizer, v, max_len, truncation, pretrained=ours) for k, v in evaluated.items() if v
    }
    if source is None:  # a pretrained vocabulary was not built from these texts: nothing to check
        check_vocabulary(
            report,
            tokenizer,
            train_texts,
            {k: (s.input_ids, s.lengths) for k, s in splits.items() if k in ("train", "val")},
            data_spec.vocab_size,
        )
    check_classes(report, ds.labels, [e.label for e in ds.train], train_cfg.class_weights != "none")
    log.info("%s: %s", ds.name, ", ".join(f"{len(s):,} {k}" for k, s in splits.items()))
    for line in report.notes:
        log.info("%s", line)
    for warning in report.warnings:
        log.warning("%s", warning)
    tokenizer_path = run_dir / "tokenizer.json"
    if at.main and source is not None:  # the checkpoint's own file, byte for byte
        shutil.copyfile(source.tokenizer_path, tokenizer_path)
    elif at.main:
        save_tokenizer(tokenizer, tokenizer_path, max_len=max_len, truncation=truncation)
    if at.main:
        write_eval_set(run_dir, ds.val)
        write_eval_set(run_dir, ds.test, TEST_SET)  # export gates int8 on it: its labels chose nothing
    samples = attention_examples(ds)
    teacher = None
    if distill is not None:  # the teacher labels the training texts and their augmented copies
        device = pick_device(train_cfg.device)
        got = student_data(distill, splits["train"], ds.train, ds.val, ds.labels, tokenizer, max_len,
                           truncation, run_dir, device, train_cfg.max_batch_tokens,
                           encode_pretrained if ours else encode_texts)  # fmt: skip
        splits["train"], teacher = got.train, got.record
    planned = None
    if recipe is not None:
        train_cfg, model_overrides, planned = recipe.apply(
            train_cfg, family, model_overrides, len(splits["train"]), len(ds.labels)
        )
        log.info("plan for %d training rows: %s", len(splits["train"]), planned)

    seed_everything(train_cfg.seed)  # the initial weights are part of what a seed reproduces
    if source is not None:
        model: Classifier = source.build(num_classes=len(ds.labels), max_len=max_len, **model_overrides)
        vectors = None
    else:
        cfg = {"vocab_size": tokenizer.get_vocab_size(), "num_classes": len(ds.labels), **model_overrides}
        cfg["max_len"] = max_len
        vectors = None if embeddings is None else load_vectors(embeddings.path)
        if vectors is not None:
            cfg.setdefault("d_model", vectors.vector_size)  # the vectors' width unless --d-model says so
        model = build_model(family, cfg)
    if vectors is not None and embeddings is not None:
        report.figures["embeddings"] = apply_embeddings(model, vectors, tokenizer, embeddings.freeze)
        del vectors
    # Encoded, checked and written out, no text is read again: free them all before training.
    # What outlives the texts keeps their heap pages resident, so the evaluation texts go too
    # (they lie among the training ones), and the tokenizer, whose vocabulary was learnt among
    # them, is reloaded from its file once they are gone: at 120,000 long texts the two kept
    # 60 and 50 MB of freed memory resident through training.
    ds = dataclasses.replace(ds, train=[], val=[], test=[], extra={})
    del train_texts, evaluated, tokenizer
    release_unused_memory()
    # Only rank 0 writes the run (and has the file): the others need no tokenizer from here on.
    written = source.tokenizer if source is not None else load_tokenizer(tokenizer_path) if at.main else None
    cpu_start = time.process_time()  # wall time alone misleads on a shared machine
    history = fit(
        model,
        splits["train"],
        splits["val"],
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
    release_unused_memory()  # the last steps' activations: evaluation and pictures need far less
    device = pick_device(train_cfg.device)
    evaluated_splits = {k: s for k, s in splits.items() if k != "train"}
    evaluation: Evaluation = evaluate_splits(
        model, evaluated_splits, ds.labels, ds.ordered, device, train_cfg.max_batch_tokens, history.epochs
    )
    for warning in evaluation.warnings:
        log.warning("%s", warning)
    metrics: dict[str, Any] = {
        "task": ds.name,
        "family": family,
        "labels": list(ds.labels),
        "ordered_labels": ds.ordered,
        "params": sum(p.numel() for p in model.parameters()),
        "tokenizer": data_spec.tokenizer if source is None else f"pretrained: {source.source}",
        "processes": at.world,  # torchrun's ranks (1 without it); a step took batch_size on each
        "train_seconds": round(history.seconds, 2),
        "train_cpu_seconds": round(cpu_seconds, 2),
        "best_epoch": history.best_epoch,
        "epochs_run": len({row["epoch"] for row in history.epochs}),
        "validations": len(history.epochs),  # one an epoch, more with eval_every
        "out_of_time": history.out_of_time,
        "seeds": {"data": data_spec.seed, "weights": train_cfg.seed},  # --data-seed, --seed
        "select_by": train_cfg.select_by,
        "class_weights": train_cfg.class_weights,
        **evaluation.scores,
        "data": report.figures,
        "warnings": report.warnings + evaluation.warnings,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],  # how shared the machine was
        "history": history.epochs,
    }
    if teacher is not None:
        metrics["teacher"] = teacher
    if planned is not None:
        metrics["plan"] = dataclasses.asdict(planned)
    assert written is not None
    write_run(run_dir, model, written, ds, metrics, evaluation, history, truncation, samples)
    if not history.out_of_time:  # complete: nothing left to resume
        (run_dir / RESUME).unlink(missing_ok=True)
    distributed.barrier()
    return RunResult(run_dir, metrics, history)


def _pretrained(family: str, pretrained: str | None) -> Pretrained | None:
    """The checkpoint to fine-tune, checked before any data is read (the encoder family needs one)."""
    if pretrained is None:
        if family == "encoder":
            raise datasets.DataError(
                "the encoder family fine-tunes a pretrained checkpoint: give --pretrained"
            )
        return None
    if family != "encoder":
        raise datasets.DataError(f"--pretrained fine-tunes the encoder family, not {family}")
    return load_pretrained(pretrained)


def _tokenizer(texts: list[str], spec: DataSpec, add_cls: bool, at: distributed.Ranks) -> Tokenizer:
    """The tokenizer learnt on the training texts; under torchrun rank 0 learns it and sends it,
    so every rank encodes with the same vocabulary."""

    def built() -> Tokenizer:
        return build_tokenizer(
            texts,
            kind=spec.tokenizer,
            min_frequency=spec.min_frequency,
            add_cls=add_cls,
            vocab_size=spec.vocab_size,
        )

    if at.world == 1:
        return built()
    return Tokenizer.from_str(distributed.from_rank_0(lambda: built().to_str(), at))
