"""The data and token flags of `attnserve-train`, and the DataSpec they make."""

from __future__ import annotations

import argparse

from attnserve.training import data as datasets
from attnserve.training.data.spec import DataSpec
from attnserve.training.text.tokenizer import TRUNCATION_SIDES
from attnserve.training.text.vocabulary import KINDS


def _max_len(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of tokens or 'auto', got {value!r}") from None


def add_data_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data")
    g.add_argument(
        "--task", default="car-order", choices=list(datasets.TASKS), help="built-in task (default: car-order)"
    )
    g.add_argument(
        "--data",
        default=None,
        metavar="PATH",
        help="your data instead of --task: a CSV/TSV/JSONL/Parquet file, a save_to_disk folder "
        "or a Hugging Face dataset name",
    )
    g.add_argument(
        "--split", default="train", help="split of a Hugging Face dataset to train on (default: train)"
    )
    g.add_argument("--val-data", default=None, metavar="PATH", help="a separate validation file or dataset")
    g.add_argument("--val-split", default=None, help="validation split of --data (e.g. validation)")
    g.add_argument("--test-data", default=None, metavar="PATH", help="a separate test file or dataset")
    g.add_argument("--test-split", default=None, help="test split of --data (e.g. test)")
    g.add_argument(
        "--val-fraction",
        type=float,
        default=None,
        help="share carved out for validation when no validation part is given (default: 0.1; "
        "reviews-*: 1/12)",
    )
    g.add_argument(
        "--test-fraction", type=float, default=None, help="likewise for test (default: as --val-fraction)"
    )
    g.add_argument(
        "--data-seed",
        type=int,
        default=None,
        metavar="INT",
        help="seed of a built-in task's generated data and of every split; --seed then picks the "
        "initial weights and batch order alone (default: --seed)",
    )
    g.add_argument("--text-column", default="text", help="(default: text)")
    g.add_argument("--label-column", default="label", help="(default: label)")
    g.add_argument(
        "--group-column",
        default=None,
        help="rows sharing a value stay in one split (default: none, every row alone)",
    )
    g.add_argument(
        "--labels",
        default=None,
        metavar="A,B,...",
        help="class names in order (default: the values that occur, sorted)",
    )
    g.add_argument(
        "--multi-label",
        action="store_true",
        help="each text has any number of labels: a label cell holds them joined by --label-separator "
        "(an empty cell: none); one sigmoid per label, trained with binary cross-entropy",
    )
    g.add_argument(
        "--label-separator",
        default="|",
        metavar="SEP",
        help="--multi-label: what joins the labels of a cell (default: |)",
    )
    g.add_argument(
        "--ordinal",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="labels are ranks (reports mean absolute error) (default: numeric labels are)",
    )
    g.add_argument(
        "--size",
        "--n-pairs",
        dest="n_pairs",
        type=int,
        metavar="N",
        default=None,
        help="built-in task size: pairs for car-order/greetings-food, reviews for reviews-* "
        "(default: the task's own: "
        + ", ".join(f"{d.size} for {name}" for name, d in datasets.DEFAULTS.items())
        + ")",
    )
    g.add_argument(
        "--distractor-prefix",
        action="store_true",
        help="prefix each text with another text of its split (works with --data too)",
    )
    t = p.add_argument_group("tokens")
    t.add_argument(
        "--max-len",
        type=_max_len,
        default=None,
        metavar="N|auto",
        help="tokens per text (default: auto for --data; 256 for reviews-*; 64 otherwise)",
    )
    t.add_argument(
        "--max-len-percentile",
        type=float,
        default=95.0,
        help="--max-len auto: this percentile of the training lengths (default: 95)",
    )
    t.add_argument("--max-len-cap", type=int, default=512, help="--max-len auto: at most this (default: 512)")
    t.add_argument(
        "--truncation",
        choices=TRUNCATION_SIDES,
        default="head",
        help="which part of a longer text to keep (default: head)",
    )
    t.add_argument(
        "--tokenizer",
        choices=KINDS,
        default=DataSpec.tokenizer,
        help="wordlevel: a word never seen in training becomes [UNK]; wordpiece, bpe: it splits "
        f"into pieces that were seen (default: {DataSpec.tokenizer})",
    )
    t.add_argument(
        "--vocab-size",
        type=int,
        default=0,
        help="largest vocabulary, special tokens included: wordlevel keeps the most frequent words "
        "(the rest become [UNK]), wordpiece/bpe learn fewer merges; 0 = no cap (default: 0)",
    )
    t.add_argument(
        "--min-frequency", type=int, default=1, help="words seen fewer times become [UNK] (default: 1)"
    )


def data_spec(ns: argparse.Namespace) -> DataSpec:
    labels = None if ns.labels is None else tuple(x.strip() for x in ns.labels.split(",") if x.strip())
    return DataSpec(
        task=ns.task,
        path=ns.data,
        split=ns.split,
        val_path=ns.val_data,
        val_split=ns.val_split,
        test_path=ns.test_data,
        test_split=ns.test_split,
        val_fraction=ns.val_fraction,
        test_fraction=ns.test_fraction if ns.test_fraction is not None else ns.val_fraction,
        text_column=ns.text_column,
        label_column=ns.label_column,
        group_column=ns.group_column,
        labels=labels,
        ordinal=ns.ordinal,
        multi_label=ns.multi_label,
        label_separator=ns.label_separator,
        n_pairs=ns.n_pairs,
        distractor_prefix=ns.distractor_prefix,
        min_frequency=ns.min_frequency,
        tokenizer=ns.tokenizer,
        vocab_size=ns.vocab_size,
        max_len=ns.max_len,
        max_len_percentile=ns.max_len_percentile,
        max_len_cap=ns.max_len_cap,
        truncation=ns.truncation,
        seed=ns.data_seed if ns.data_seed is not None else ns.seed if ns.seed is not None else 0,
    )
