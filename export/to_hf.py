"""``attnserve-export --to-hf RUN OUT``: an encoder run back out as a Hugging Face classifier folder.

The way back from attnserve: a run fine-tuned with ``attnserve-train --pretrained`` becomes
the folder ``save_pretrained`` writes (config.json naming e.g. BertForSequenceClassification
with the run's labels as id2label, model.safetensors, tokenizer.json with
tokenizer_config.json and special_tokens_map.json), loadable by
``AutoModelForSequenceClassification`` and ``AutoTokenizer`` with no attnserve installed,
and importable again by ``attnserve-export OUT`` (hf_import.py).

Nothing is trusted: the folder is written to a staging folder beside OUT, loaded back by
transformers as its users load it, and must give the run's token ids (a text cut at max_len
included) and the run's logits within the tolerance; only then is it moved to OUT. A folder
that fails is deleted and the command exits 1 naming the text and the difference. Runs with
no transformers equivalent (the small families, the attention head, head+tail truncation,
other encoder types) are refused with exit 2 before anything is written, as is an OUT that
already holds files, unless ``--overwrite``.
"""

from __future__ import annotations

import argparse
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console

from attnserve.export.errors import ExportError, ExportRequestError
from attnserve.export.evalset import load_bundle_tokenizer, read_eval_set
from attnserve.export.hf_folder import read_classifier_folder
from attnserve.export.hf_import import GOLDEN_TEXTS
from attnserve.export.parity import DEFAULT_TOLERANCE
from attnserve.export.source import is_imported, load_training_run
from attnserve.export.to_hf_model import HEADS, build_classifier, input_names, save_tokenizer
from attnserve.service.bundle import Truncation
from attnserve.service.common.helpformat import DefaultsHelpFormatter
from attnserve.training.models.encoder import EncoderClassifier
from attnserve.training.run.checkpoint import LoadedRun
from attnserve.training.text.tokenizer import encode_batch

TO_HF_FLAG = "--to-hf"
CHECK_TEXTS = 16  # validation texts (eval.jsonl) the folder is proven on, besides the built-in ones


@dataclass(frozen=True)
class Proven:
    """What the written folder was checked on, and how close transformers came."""

    texts: int
    cut_at_max_len: int  # of them, texts longer than max_len (cut as the run cuts them)
    max_abs_diff: float
    tolerance: float
    transformers_version: str


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"attnserve-export {TO_HF_FLAG}",
        description="Write an encoder run (attnserve-train --pretrained) as a Hugging Face sequence-"
        "classifier folder, proven to give the run's logits when transformers loads it.",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        type=Path,
        help="the training run directory (checkpoint.pt, tokenizer.json)",
    )
    p.add_argument(
        "out",
        metavar="OUT",
        type=Path,
        help="the folder to write (created; must be empty unless --overwrite)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace OUT when it already holds files")
    p.add_argument(
        "--tolerance", type=float, default=DEFAULT_TOLERANCE, help="max |transformers - run| logit allowed"
    )
    return p


def to_hf_command(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    console = Console(highlight=False)
    write_hf_folder(
        args.run_dir,
        args.out,
        overwrite=args.overwrite,
        tolerance=args.tolerance,
        say=lambda line: console.print(line, markup=False, soft_wrap=True),
    )
    return 0


def write_hf_folder(
    run_dir: Path,
    out: Path,
    *,
    overwrite: bool = False,
    tolerance: float = DEFAULT_TOLERANCE,
    say: Callable[[str], None] = print,
) -> Proven:
    """Write ``run_dir`` to ``out`` as a Hugging Face folder, proven against the run (module doc)."""
    _check_target(run_dir, out, overwrite)
    run, truncation = _encoder_run(run_dir)
    model_type = str(run.config["encoder"]["model_type"])
    say(f"read {run_dir}: encoder ({model_type}), {len(run.labels)} labels {run.labels}, "
        f"max_len {run.max_len}, truncation {truncation}")  # fmt: skip
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar per save and load fills a log
    out.parent.mkdir(parents=True, exist_ok=True)
    # Beside OUT, so that publishing is one rename; mkdir (not mkdtemp's 0700) keeps the umask.
    staging = out.parent / f".{out.name}.to-hf-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        classifier = build_classifier(run)
        classifier.save_pretrained(str(staging))
        save_tokenizer(run, staging, truncation, input_names(classifier))
        architecture = read_classifier_folder(staging).architecture  # what `attnserve-export OUT` checks
        say(f"wrote config.json ({architecture}), model.safetensors and the tokenizer; loading them "
            "with transformers")  # fmt: skip
        proven = prove_folder(staging, run, truncation, tolerance)
        say(f"transformers {proven.transformers_version}: the run's token ids and logits on "
            f"{proven.texts} texts ({proven.cut_at_max_len} cut at max_len {run.max_len}), "
            f"logits max |Δ| {proven.max_abs_diff:.2e} (<= {tolerance:g})")  # fmt: skip
        if out.exists():
            shutil.rmtree(out)  # empty, or --overwrite: _check_target said so
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    files = sorted(out.iterdir())
    say(f"wrote {out}: " + ", ".join(f"{f.name} ({f.stat().st_size:,} B)" for f in files))
    return proven


def _check_target(run_dir: Path, out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ExportRequestError(f"{out} exists and is not a folder")
    run, target = run_dir.resolve(), out.resolve()
    if target == run or target in run.parents:
        raise ExportRequestError(f"{out} holds the run {run_dir}; write the Hugging Face folder elsewhere")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ExportRequestError(f"{out} is not empty; pass --overwrite to replace it")


def _encoder_run(run_dir: Path) -> tuple[LoadedRun, Truncation]:
    """The run, refused unless transformers has a classifier that computes what it computes."""
    if is_imported(run_dir):
        raise ExportRequestError(
            f"{run_dir} is a Hugging Face folder already (config.json, no checkpoint.pt); "
            f"{TO_HF_FLAG} takes an attnserve training run"
        )
    run = load_training_run(run_dir)
    model = run.model
    if not isinstance(model, EncoderClassifier):
        raise ExportRequestError(
            f"{run_dir} is a {run.family} run, which has no Hugging Face equivalent: {TO_HF_FLAG} "
            "writes encoder runs (attnserve-train --pretrained), whose network is a transformers encoder"
        )
    if model.config.head != "cls":
        raise ExportRequestError(
            f"{run_dir} was trained with --encoder-head {model.config.head} (a learned query pooling "
            f"every token), which no transformers ...ForSequenceClassification head computes; "
            f"{TO_HF_FLAG} writes --encoder-head cls runs"
        )
    model_type = str(model.config.encoder["model_type"])
    if model_type not in HEADS:
        raise ExportRequestError(
            f"{run_dir} fine-tuned a {model_type!r} encoder; {TO_HF_FLAG} writes these model types: "
            f"{', '.join(HEADS)}"
        )
    if run.truncation not in ("head", "tail"):
        raise ExportRequestError(
            f"{run_dir} was trained with --truncation {run.truncation}; a transformers tokenizer cuts "
            "one end of a long text (truncation_side), so retrain with --truncation head or tail"
        )
    return run, "tail" if run.truncation == "tail" else "head"


def prove_folder(folder: Path, run: LoadedRun, truncation: Truncation, tolerance: float) -> Proven:
    """ExportError unless transformers, loading ``folder`` as its users do, gives the run's
    token ids and, on a padded batch, the run's logits (each text alone) within ``tolerance``."""
    import transformers
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    model, info = AutoModelForSequenceClassification.from_pretrained(
        str(folder), local_files_only=True, output_loading_info=True
    )
    if info.get("missing_keys") or info.get("mismatched_keys"):
        raise ExportError(f"transformers loads the written weights with gaps: {info}")
    if [model.config.id2label[i] for i in range(len(run.labels))] != run.labels:
        raise ExportError(
            f"config.json's id2label {model.config.id2label} is not the run's labels {run.labels}"
        )
    texts, ours = _check_texts(run), load_bundle_tokenizer(run.tokenizer_path)
    expected, cut = [], 0
    for text in texts:
        encoded = encode_batch(ours, [text], run.max_len, truncation)  # one text: no padding
        ids, mask = encoded.input_ids, encoded.attention_mask  # [1, T]
        theirs = tokenizer(text, truncation=True)["input_ids"]  # model_max_length, truncation_side
        if ids[0].tolist() != list(theirs):
            raise ExportError(
                f"transformers' tokenizer encodes {text[:60]!r} as {list(theirs)[:16]}, the run as "
                f"{ids[0].tolist()[:16]}: the written tokenizer does not tokenize as the model expects"
            )
        cut += encoded.truncated[0]
        with torch.inference_mode():
            expected.append(run.model.logits(torch.from_numpy(ids), torch.from_numpy(mask))[0])
    batch = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
    with torch.inference_mode():
        logits = model.eval()(**batch).logits  # [N, C]
    differences = (logits - torch.stack(expected)).abs().amax(dim=1)  # [N]
    worst = int(differences.argmax())
    if not torch.isfinite(differences).all() or float(differences[worst]) > tolerance:
        raise ExportError(
            f"transformers' logits differ from the run's by {float(differences[worst]):.3g} on "
            f"{texts[worst][:60]!r} (tolerance {tolerance:g}); nothing was written"
        )
    return Proven(len(texts), cut, float(differences.max()), tolerance, transformers.__version__)


def _check_texts(run: LoadedRun) -> list[str]:
    """Validation texts, the built-in sentences, and one past max_len (cut on the run's side)."""
    own = read_eval_set(run.eval_path, len(run.labels)).texts[:CHECK_TEXTS] if run.eval_path else []
    long_text = " ".join(GOLDEN_TEXTS * (run.max_len // 8 + 1))  # each sentence is 8 tokens or more
    return [*own, *GOLDEN_TEXTS, long_text]
