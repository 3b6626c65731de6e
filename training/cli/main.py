"""`attnserve-train`: train one model (or every family side by side) and print its report.

Every model-config and trainer field is a flag, generated from the frozen dataclasses so the
CLI can never drift from the code. Your own data (--data) trains gru_attention and stops on
the validation loss (training/data/recipe.py, measured on SST-2). A built-in task brings its
own recipe (its size, trainer settings and, for the transformer, model settings;
`--task car-order` trains 2 layers of 2 heads with sinusoidal positions and attention
pooling): flags given override it, and with --data none applies. `--pretrained CHECKPOINT`
fine-tunes a BERT-family encoder in Hugging Face format with its own tokenizer (family
encoder, the fine-tuning recipe of training/loop/config.py). Under `torchrun --nproc-per-node N
-m attnserve.training ...` every family trains on N processes (docs/training.md).
`attnserve-train compare --help` for the side-by-side runs, `attnserve-train distill --help`
to train a student on a teacher run's logits, `attnserve-train document --help` to learn how a
served model's windows decide a long text (a document head). `--long-texts windows` trains the
whole model on long texts, cut into the windows a server reads (training/long_texts/).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from attnserve.training import data as datasets
from attnserve.training.cli.data_flags import add_data_flags, data_spec
from attnserve.training.cli.exits import UsageError, run_cli
from attnserve.training.cli.flags import (
    add_dataclass_flags,
    add_family_flags,
    family_fields,
    family_help,
    picked,
)
from attnserve.training.cli.summary import print_summary
from attnserve.training.data.recipe import DATA_FAMILY, DATA_TRAINING, DataRecipe
from attnserve.training.distill import cli as distill_cli
from attnserve.training.long_texts.settings import add_long_text_flags, long_text_settings
from attnserve.training.loop import distributed
from attnserve.training.loop.config import CLASS_WEIGHTS, SELECT_BY, TrainConfig
from attnserve.training.loop.resume import ResumeError
from attnserve.training.models import FAMILIES, REGISTRY
from attnserve.training.models import families as family_parts
from attnserve.training.models.encoder import ENCODER_HEADS
from attnserve.training.run.pipeline import train_run
from attnserve.training.text.embeddings import EmbeddingInit

PROG = "attnserve-train"
DEFAULT_FAMILY = "transformer"  # a built-in task's model recipe (TaskDefaults.model) applies to it
# Derived from the data, the tokenizer or a checkpoint, or set by the data flags (--max-len),
# never by hand.
FIXED = frozenset[str]().union(*(family.derived for family in REGISTRY.values()))
TRAIN_NOTES = {
    "batch_size": "car-order: 128",
    "epochs": "0 = 25, or more when needed to reach --min-steps; car-order: 28",
    "min_steps": "optimisation steps an automatic epoch budget reaches at least",
    "target_steps": "epochs 0: plan the epochs of about this many steps instead of 25 (0 = off); "
    "--data: planned from the data's size (3000 on SST-2)",
    "patience": "validations without improvement before stopping (--data: planned, 3 on SST-2)",
    "select_by": f"which validation figure picks the kept epoch: {' | '.join(SELECT_BY)} "
    "(--multi-label: micro_f1 unless given)",
    "class_weights": f"{' | '.join(CLASS_WEIGHTS)}: balanced weighs every class equally in the loss",
    "threads": "torch CPU threads; 0: the faster of 1 and every core for a timed probe step, "
    "timed again every minute; car-order: 2 (at most the usable cores)",
    "word_dropout": "share of real tokens replaced by [UNK] while training",
    "max_batch_tokens": "padded tokens one forward/backward pass holds; a larger batch is split "
    "into micro-batches with the same gradient (0 = whole batches)",
    "max_seconds": "wall-clock budget, checked between steps; 0 = none",
    "resume": "continue the run in --out from its resume.pt (same flags)",
    "group_by_length": "batches of rows of similar length, each padded to its own longest",
    "pad_to_max_len": "pad every batch to max_len (the slow path, for measuring)",
    "fused_attention": "fused attention kernel while training (off: the written-out one)",
    "device": "auto | cpu | cuda | mps",
    "schedule": "cosine | linear: the learning rate's decay after the warmup; --pretrained: linear",
    "eval_every": "steps between validations inside an epoch (0 = once an epoch); --pretrained: 100",
    "log_every": "off a terminal, a progress line every this many steps (0 = none); --pretrained: 20",
    "plan_to_budget": "with --max-seconds, end the learning-rate decay with the budget (timed on the "
    "first steps); --pretrained: on",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=family_help(FAMILIES, FIXED),
    )
    p.add_argument(
        "--model",
        default=None,
        choices=sorted(FAMILIES),
        help=f"model family (default: {DATA_FAMILY} with --data, {DEFAULT_FAMILY} for built-in tasks)",
    )
    p.add_argument("--out", default="runs/default", help="run directory to write (default: runs/default)")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    add_data_flags(p)
    enc = p.add_argument_group("pretrained encoder")
    enc.add_argument(
        "--pretrained",
        default=None,
        metavar="PATH_OR_NAME",
        help="fine-tune this BERT-family checkpoint (a Hugging Face folder with config.json, weights "
        "and tokenizer.json, or a Hub name where the network allows): family encoder, its own "
        "tokenizer, AdamW 5e-5, batch 32, linear decay, validation every 100 steps",
    )
    enc.add_argument(
        "--encoder-head",
        default=None,
        choices=ENCODER_HEADS,
        help="what the classifier reads: cls (the [CLS] vector) or attention (a learned query over "
        "the last layer) (default: cls)",
    )
    e = p.add_argument_group("embeddings")
    e.add_argument(
        "--init-embeddings",
        default=None,
        metavar="FILE",
        help="start the token embedding from word vectors: word2vec binary (.bin), word2vec or GloVe "
        "text; --d-model defaults to their width; the coverage of the vocabulary is reported",
    )
    e.add_argument(
        "--freeze-embeddings",
        action="store_true",
        help="keep the initial embedding fixed (default: fine-tune it with the model)",
    )
    add_dataclass_flags(p.add_argument_group("training"), TrainConfig, notes=TRAIN_NOTES)
    add_family_flags(p, FAMILIES, FIXED)
    return p


def resolve_family(ns: argparse.Namespace) -> str:
    """--model, the family --pretrained fine-tunes, or the default: the --data recipe's family
    for your data, else the task's."""
    default = DEFAULT_FAMILY if ns.data is None else DATA_FAMILY
    ns.model = family_parts.resolve_family(ns.model, getattr(ns, "pretrained", None), default)
    return str(ns.model)


def encoder_head(ns: argparse.Namespace) -> dict[str, Any]:
    """--encoder-head as the fine-tuned family's ``head`` field; refused for any other family."""
    if getattr(ns, "encoder_head", None) is None:
        return {}
    if REGISTRY[ns.model].checkpoint is None:
        raise UsageError("--encoder-head applies to --pretrained runs")
    return {"head": ns.encoder_head}


def model_overrides(ns: argparse.Namespace) -> dict[str, Any]:
    """The chosen family's flags; a flag of another family is refused by name."""
    resolve_family(ns)
    owners = family_fields(FAMILIES, FIXED)
    family = REGISTRY[ns.model]
    given = {name: getattr(ns, name) for name in owners if getattr(ns, name, None) is not None}
    given |= encoder_head(ns)
    if ns.data is None and ns.model == DEFAULT_FAMILY:  # a built-in task's recipe, under the flags
        given = {**dict(datasets.DEFAULTS[ns.task].model), **given}
    foreign = sorted(n for n in given if ns.model not in owners[n])
    if foreign:
        own = ", ".join("--" + n.replace("_", "-") for n in owners if ns.model in owners[n])
        raise UsageError(
            f"--{foreign[0].replace('_', '-')} is a flag of {', '.join(owners[foreign[0]])}, not of "
            f"{ns.model} (its flags: {own})"
        )
    # A checkpoint's config is read later: its fields are checked against a stand-in for it.
    try:  # check the values now, not after the data is loaded
        family.model.config_cls(vocab_size=8, num_classes=2, **family.stand_in, **given)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc
    return given


def train_config(ns: argparse.Namespace) -> TrainConfig:
    """The training flags given, then the family's recipe or a built-in task's own settings,
    then TrainConfig's."""
    values = picked(ns, TrainConfig)
    if getattr(ns, "multi_label", False):  # the recipes' figures (loss, macro_f1) are single-label's choice
        values.setdefault("select_by", "micro_f1")
    recipe = datasets.DEFAULTS[ns.task].training if ns.data is None else DATA_TRAINING
    recipe = REGISTRY[resolve_family(ns)].recipe.training or recipe
    for name, value in recipe:
        values.setdefault(name, value)
    try:
        return TrainConfig(**values)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _configure_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("attnserve.training")
    logger.handlers[:] = [handler]
    # Under torchrun the other ranks repeat rank 0's lines: they say only what goes wrong.
    quiet = int(os.environ.get("RANK", "0")) > 0
    logger.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)
    logger.propagate = False


def _train(argv: Sequence[str]) -> int:
    if argv[:1] == ["compare"]:
        from attnserve.training.cli.compare import main as compare_main

        return compare_main(argv[1:])
    if argv[:1] == ["tune"]:
        return _tune(argv[1:])
    if argv[:1] == ["document"]:
        from attnserve.training.document.cli import main as document_main

        return document_main(argv[1:], _configure_logging)
    parser, distilling = build_parser(), argv[:1] == ["distill"]
    if distilling:  # the same run, with a teacher: every flag above applies to the student
        parser.prog, parser.description = f"{PROG} distill", distill_cli.__doc__
        distill_cli.add_distill_flags(parser)
        argv = argv[1:]
    else:
        add_long_text_flags(parser)
    ns = parser.parse_args(argv)
    resolve_family(ns)
    _configure_logging(ns.verbose)
    long_texts = None if distilling else long_text_settings(ns)
    spec, overrides, cfg = data_spec(ns), model_overrides(ns), train_config(ns)
    if long_texts is not None:  # whole texts as windows: its own loop (training/long_texts/)
        from attnserve.training.long_texts.run import train_long_run
        from attnserve.training.long_texts.summary import print_long_summary

        metrics = train_long_run(ns.out, ns.model, overrides, cfg, spec, long_texts, pretrained=ns.pretrained)
        print_long_summary(Console(), metrics, ns.out)
        return 0
    distill = distill_cli.distill_spec(ns) if distilling else None
    if ns.freeze_embeddings and ns.init_embeddings is None:
        raise UsageError("--freeze-embeddings needs --init-embeddings FILE")
    init = None if ns.init_embeddings is None else EmbeddingInit(ns.init_embeddings, ns.freeze_embeddings)
    given = frozenset(picked(ns, TrainConfig))  # word vectors (init) set the width, not the plan
    steps_factor = distill_cli.STUDENT_STEPS_FACTOR if distilling else 1.0
    planned = ns.data is not None and REGISTRY[ns.model].recipe.planned
    recipe = DataRecipe(given, keep_width=init is not None, steps_factor=steps_factor) if planned else None
    result = train_run(ns.out, ns.model, overrides, cfg, spec, embeddings=init, recipe=recipe,
                       distill=distill, pretrained=ns.pretrained)  # fmt: skip
    distributed.finish()  # every rank leaves the process group before the process ends
    if distributed.launched() and int(os.environ.get("RANK", "0")) > 0:
        return 0  # rank 0 reports
    print_summary(Console(), result.metrics, ns.out)
    return 0


def _tune(argv: Sequence[str]) -> int:
    from attnserve.training.tune.search import add_tune_flags, tune_main

    p = build_parser()
    p.prog, p.description = f"{PROG} tune", tune_doc()
    p.set_defaults(out="runs/tune")
    add_tune_flags(p)
    ns = p.parse_args(argv)
    _configure_logging(ns.verbose)
    # The search draws the family; flags of any family are kept where they fit. The family
    # named here gives the trainer recipe: the fine-tuned one's with --pretrained.
    ns.model = family_parts.resolve_family(None, ns.pretrained, DATA_FAMILY)
    owners = family_fields(FAMILIES, FIXED)
    given = {name: getattr(ns, name) for name in owners if getattr(ns, name, None) is not None}
    given |= encoder_head(ns)  # fixed for every trial: the search leaves it
    return tune_main(ns, train_config(ns), data_spec(ns), given)


def tune_doc() -> str:
    from attnserve.training.tune import search

    return search.__doc__ or ""


def main(argv: Sequence[str] | None = None) -> int:
    # The command's logging lasts as long as the command: called in a process that goes on
    # (tests, notebooks), it must leave no handler bound to a stream that may close.
    logger = logging.getLogger("attnserve.training")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    try:
        return run_cli(PROG, _train, list(sys.argv[1:] if argv is None else argv), user_errors=(ResumeError,))
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
