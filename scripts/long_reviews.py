"""Long reviews made of SST-2 sentences, for docs/results/long-texts.md.

    .venv/bin/python scripts/long_reviews.py --window-model models/sst2-sentiment/2 \\
        --sst2 /work/shared/data/sst2 --out /tmp/long-reviews

Per split (train.csv, dev.csv, test.csv), every sentence is scored by the window model as a
server scores it (cut at max_len, the bundle's temperature). The fillers are the split's
sentences of at least --min-words words on which the model is least sure (probability
closest to 0.5: the --filler-share of them); each document is 10 to 20 fillers drawn from
them with 2 verdict sentences of the document's label (drawn from the split's other
sentences of that label) inserted at random places (--train-from dev: OUT/train.csv from
dev.csv's sentences, which the window model did not train on). Writes OUT/{train,dev,test}.csv
(text,label) and OUT/test-verdicts.csv (each test document's two verdicts alone, as one
text), and prints how the window model reads the verdicts alone (as windows, their mean).
Nothing is written into the repository. `--read CSV...` reads documents cut at the head and
at the tail (and a test.csv's verdicts alone) with --window-model. `--paired RUN` compares,
document by document, the head with mean and max on a document run's --test part (its cached
window logits).
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import sys
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from attnserve.service.bundle import COMBINES, TOKENIZER_FILE, LongTexts, softmax
from attnserve.service.engine.request.windows import combined
from attnserve.training.document.data import read_rows
from attnserve.training.document.head import make_part, policy_with
from attnserve.training.document.record import CACHE_FILE, read_record
from attnserve.training.document.windows import WindowModel, load_window_model

SPLITS = {"train": "train.csv", "dev": "dev.csv", "test": "test.csv"}


def read_split(path: Path) -> list[tuple[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return [(row["sentence"], row["label"]) for row in csv.DictReader(handle)]


def sure(model: WindowModel, texts: list[str]) -> np.ndarray:
    """[N] the model's top probability of each text, cut at max_len as a server cuts it."""
    ids = [list(row) for row in model.tokenizer().encode(texts).ids]
    return np.asarray(softmax(model.logits(ids)[0], model.temperature).max(axis=1))


def documents(
    rows: list[tuple[str, str]],
    certainty: np.ndarray,
    count: int,
    args: argparse.Namespace,
    rng: random.Random,
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], dict[str, float]]:
    """`count` documents and their verdict pairs from `rows`, and what the fillers were."""
    ordered = sorted(range(len(rows)), key=lambda i: certainty[i])
    fillers = ordered[: max(1, round(len(ordered) * args.filler_share))]
    taken = set(fillers)
    verdicts = {
        label: [i for i in range(len(rows)) if i not in taken and rows[i][1] == label]
        for label in ("negative", "positive")
    }
    docs, pairs = [], []
    for _ in range(count):
        label = rng.choice(("negative", "positive"))
        parts = [rows[i][0] for i in rng.sample(fillers, rng.randint(args.min_fillers, args.max_fillers))]
        chosen = [rows[i][0] for i in rng.sample(verdicts[label], 2)]
        for sentence in chosen:
            parts.insert(rng.randint(0, len(parts)), sentence)
        docs.append((" ".join(parts), label))
        pairs.append((" ".join(chosen), label))
    top = certainty[fillers]
    return (
        docs,
        pairs,
        {"fillers": len(fillers), "top_p_min": float(top.min()), "top_p_max": float(top.max())},
    )


def verdicts_alone(model: WindowModel, pairs: list[tuple[str, str]], policy: LongTexts) -> float:
    """Accuracy of the window model on each document's two verdicts as one text (windows, mean)."""
    texts = [text for text, _ in pairs]
    windows = model.cut(texts, policy, [f"verdicts {n}" for n in range(1, len(texts) + 1)])
    logits = model.logits([row for each in windows for row in each])[0]
    starts = np.cumsum([0, *(len(each) for each in windows)])
    right = 0
    for i, (_, label) in enumerate(pairs):
        folded = combined(logits[starts[i] : starts[i + 1]], policy, model.manifest.scores, model.temperature)
        right += model.labels[int(folded.argmax())] == label
    return right / len(pairs)


def paired(run: Path) -> None:
    """Per test document, which of head and mean (or max) is right alone, and the exact McNemar p."""
    record = read_record(run)
    model = load_window_model(Path(record.window_model.path))
    test = record.data.split.test
    assert test is not None, f"{run} was trained without --test"
    labels = read_rows(
        Path(test.file), model.labels, record.data.text_column, record.data.label_column
    ).labels
    with np.load(run / CACHE_FILE) as cache:
        logits, counts = cache["logits"], cache["counts"]
    part = make_part(logits, counts, np.arange(len(counts) - len(labels), len(counts)), labels)
    right = {}
    for combine in COMBINES:
        policy = policy_with(record.policy, combine, record.head)
        folded = [
            combined(part.text(i), policy, model.manifest.scores, model.temperature) for i in range(len(part))
        ]
        right[combine] = np.asarray([z.argmax() for z in folded]) == part.labels
    for other in ("mean", "max"):
        b, c = int((right["head"] & ~right[other]).sum()), int((~right["head"] & right[other]).sum())
        p = min(1.0, 2 * sum(math.comb(b + c, k) for k in range(min(b, c) + 1)) / 2 ** (b + c))
        print(
            f"test, head against {other}: head alone right {b}, {other} alone right {c}, "
            f"exact McNemar p {p:.3f}"
        )


def truncations(model: WindowModel, path: Path) -> None:
    """The window model's accuracy on a file of documents cut at max_len at the head (the first
    tokens, as a server truncates) and at the tail (the last tokens), and on its verdicts alone."""
    rows = read_rows(path, model.labels, "text", "label")
    tokenizer = Tokenizer.from_file(str(model.root / TOKENIZER_FILE))
    tokenizer.no_padding()
    for side in ("right", "left"):  # tokenizers' side of the text to cut away
        tokenizer.enable_truncation(max_length=model.manifest.max_len, direction=side)
        ids = [encoding.ids for encoding in tokenizer.encode_batch(list(rows.texts))]
        right = model.logits(ids)[0].argmax(axis=1) == np.asarray(rows.labels)
        print(f"{path.name}: cut at the {'head' if side == 'right' else 'tail'}: accuracy {right.mean():.4f}")
    pairs = path.with_name("test-verdicts.csv")
    if path.name == "test.csv" and pairs.exists():
        policy = LongTexts.default(model.manifest.max_len).model_copy(update={"max_windows": 64})
        texts, labels = _rows(model, pairs)
        named = [(text, model.labels[y]) for text, y in zip(texts, labels, strict=True)]
        alone = verdicts_alone(model, named, policy)
        print(f"{pairs.name}: the two verdicts alone, read as windows (mean): accuracy {alone:.4f}")


def _rows(model: WindowModel, path: Path) -> tuple[list[str], list[int]]:
    rows = read_rows(path, model.labels, "text", "label")
    return list(rows.texts), [int(y) for y in rows.labels]


def write(path: Path, rows: list[tuple[str, str]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--window-model", type=Path, default=Path("models/sst2-sentiment/2"))
    p.add_argument("--sst2", type=Path, help="folder of train.csv, dev.csv, test.csv (sentence,label)")
    p.add_argument("--out", type=Path)
    p.add_argument("--docs", type=int, nargs=3, default=[6000, 1000, 2000], metavar=("TRAIN", "DEV", "TEST"))
    p.add_argument("--min-fillers", type=int, default=10)
    p.add_argument("--max-fillers", type=int, default=20)
    p.add_argument(
        "--filler-share", type=float, default=0.25, help="the least sure share of a split's sentences"
    )
    p.add_argument("--min-words", type=int, default=5, help="shorter SST-2 phrases are left out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--train-from",
        choices=("train", "dev"),
        default="train",
        help="the SST-2 split of OUT/train.csv's sentences (dev: ones the window model never saw)",
    )
    p.add_argument(
        "--paired",
        type=Path,
        metavar="RUN",
        help="only compare a document run's combinations on its test part",
    )
    p.add_argument(
        "--read",
        type=Path,
        nargs="+",
        metavar="CSV",
        help="only read documents cut at the head and at the tail with --window-model",
    )
    args = p.parse_args()
    if args.read is not None:
        reader = load_window_model(args.window_model)
        for path in args.read:
            truncations(reader, path)
        return 0
    if args.paired is not None:
        paired(args.paired)
        return 0
    if args.sst2 is None or args.out is None:
        p.error("--sst2 and --out are needed to write documents")
    model = load_window_model(args.window_model)
    policy = LongTexts.default(model.manifest.max_len).model_copy(update={"max_windows": 64})
    args.out.mkdir(parents=True, exist_ok=True)
    sources = {**SPLITS, "train": SPLITS[args.train_from]}
    for (split, file), count in zip(sources.items(), args.docs, strict=True):
        rng = random.Random(f"{args.seed}:{split}")  # each split its own draws: test's stay the same
        rows = [row for row in read_split(args.sst2 / file) if len(row[0].split()) >= args.min_words]
        docs, pairs, fillers = documents(rows, sure(model, [t for t, _ in rows]), count, args, rng)
        write(args.out / f"{split}.csv", docs)
        words = [len(text.split()) for text, _ in docs]
        print(
            f"{split}: {len(docs)} documents from {len(rows)} sentences of {args.min_words}+ words; "
            f"{fillers['fillers']} fillers "
            f"(top probability {fillers['top_p_min']:.3f} to {fillers['top_p_max']:.3f}); "
            f"words per document {min(words)} to {max(words)}, mean {np.mean(words):.0f}"
        )
        if split == "test":
            write(args.out / "test-verdicts.csv", pairs)
            alone = verdicts_alone(model, pairs, policy)
            print(f"test: the two verdicts alone, read as windows (mean): accuracy {alone:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
