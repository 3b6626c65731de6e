"""Fine-tune a Hugging Face encoder folder as a two-label sequence classifier with plain
PyTorch and transformers, and save it the way a transformers user has it: `save_pretrained`
of the model and its tokenizer. This is the folder `attnserve-export FOLDER` imports
(docs/export.md, "Importing a Hugging Face classifier"; figures: docs/results/hf-import.md).

    .venv/bin/python scripts/finetune_hf.py --model MODEL_DIR --train train.csv --dev dev.csv \
        --out /tmp/minilm-sst2-hf --epochs 1 --threads 2
    # a saved folder's accuracy on a file, every prediction written to a CSV
    .venv/bin/python scripts/finetune_hf.py --evaluate /tmp/minilm-sst2-hf --dev test.csv \
        --predictions /tmp/hf-test.csv

The CSV files have a text column (`--text-column`, SST-2's `sentence`) and a label column
(`negative`/`positive`, or 0/1). The loop: AdamW, a linear warm-up then linear decay to 0,
dropout on, batches padded to their longest text (cut at `--max-len` tokens); the dev
accuracy is read at the end in eval mode, with transformers' default attention.
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers

LABELS = ("negative", "positive")
ID2LABEL = dict(enumerate(LABELS))
LABEL2ID = {label: i for i, label in ID2LABEL.items()}


@dataclass(frozen=True)
class FineTune:
    """The loop's settings (the defaults are the ones docs/results/hf-import.md ran)."""

    steps: int
    batch_size: int = 32
    max_len: int = 64
    lr: float = 5e-5
    weight_decay: float = 0.01
    warmup: float = 0.06  # share of the steps
    seed: int = 0
    log_every: int = 50
    group_by_length: bool = True


@dataclass(frozen=True)
class TrainStats:
    steps: int
    seconds: float
    last_loss: float  # mean of the last `log_every` steps


def read_rows(
    path: Path | str, text_column: str = "sentence", label_column: str = "label"
) -> tuple[list[str], list[int]]:
    """Texts and label ids of a CSV file; labels are names (`negative`, `positive`) or ids."""
    texts: list[str] = []
    labels: list[int] = []
    with open(path, newline="", encoding="utf-8") as handle:
        for number, row in enumerate(csv.DictReader(handle), start=2):
            value = row[label_column].strip()
            if value in LABEL2ID:
                labels.append(LABEL2ID[value])
            elif value in ("0", "1"):
                labels.append(int(value))
            else:
                raise ValueError(f"{path}:{number}: label {value!r} is none of {LABELS} or 0/1")
            texts.append(row[text_column])
    return texts, labels


def load_pretrained(folder: Path | str, *, seed: int = 0) -> tuple[Any, Any]:
    """transformers' tokenizer and a two-label classifier of `folder` (a new head, seeded)."""
    torch.manual_seed(seed)  # the classifier head (and a missing pooler) are initialised here
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        folder, num_labels=len(LABELS), id2label=ID2LABEL, label2id=LABEL2ID
    )
    return tokenizer, model


def load_classifier(folder: Path | str) -> tuple[Any, Any]:
    """A saved classifier folder as a transformers user loads it, in eval mode."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder)
    return tokenizer, model.eval()


def linear_schedule(steps: int, warmup_steps: int) -> Callable[[int], float]:
    """The learning-rate factor: 0 -> 1 over the warm-up, then 1 -> 0 at `steps`."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        return max(0.0, (steps - step) / max(1, steps - warmup_steps))

    return factor


def shuffled_batches(
    count: int, batch_size: int, seed: int, lengths: Sequence[int] | None = None
) -> Iterator[list[int]]:
    """Row indexes, a new shuffle each epoch, forever; the last short batch of an epoch is
    dropped. With `lengths`, transformers Trainer's `group_by_length`: each shuffled run of 50
    batches is sorted by length before it is cut into batches, so a batch pads little, and the
    batches are then shuffled."""
    order = list(range(count))
    rng = random.Random(seed)
    group = batch_size * 50
    while True:
        rng.shuffle(order)
        if lengths is not None:
            order = [
                i
                for start in range(0, count, group)
                for i in sorted(order[start : start + group], key=lambda i: -lengths[i])
            ]
        epoch = [order[start : start + batch_size] for start in range(0, count - batch_size + 1, batch_size)]
        if lengths is not None:
            rng.shuffle(epoch)
        yield from epoch


def train(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    labels: Sequence[int],
    settings: FineTune,
    log: Callable[[str], None] = print,
) -> TrainStats:
    """`settings.steps` AdamW steps over shuffled batches of (texts, labels); the model is
    left in eval mode."""
    if len(texts) < settings.batch_size:
        raise ValueError(f"{len(texts)} rows: fewer than one batch of {settings.batch_size}")
    torch.manual_seed(settings.seed)  # dropout
    decay = [p for n, p in model.named_parameters() if p.ndim > 1 and "LayerNorm" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.ndim > 1 and "LayerNorm" not in n)]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": settings.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=settings.lr,
    )
    warmup_steps = round(settings.warmup * settings.steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(settings.steps, warmup_steps))
    model.train()
    lengths = None
    if settings.group_by_length:
        ids = tokenizer(list(texts), truncation=True, max_length=settings.max_len)["input_ids"]
        lengths = [len(row) for row in ids]
    batches = shuffled_batches(len(texts), settings.batch_size, settings.seed, lengths)
    losses: list[float] = []
    started = time.perf_counter()
    for step in range(1, settings.steps + 1):
        rows = next(batches)
        encoded = tokenizer(
            [texts[i] for i in rows],
            padding=True,
            truncation=True,
            max_length=settings.max_len,
            return_tensors="pt",
        )
        target = torch.tensor([labels[i] for i in rows])
        loss = model(**encoded, labels=target).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.item()))
        if step % settings.log_every == 0 or step == settings.steps:
            recent = losses[-settings.log_every :]
            seconds = time.perf_counter() - started
            log(
                f"step {step}/{settings.steps}  loss {sum(recent) / len(recent):.4f}  "
                f"lr {scheduler.get_last_lr()[0]:.2e}  {seconds:.0f} s  {step / seconds:.2f} steps/s"
            )
    model.eval()
    recent = losses[-settings.log_every :]
    return TrainStats(settings.steps, time.perf_counter() - started, sum(recent) / len(recent))


def predict(
    model: Any, tokenizer: Any, texts: Sequence[str], *, batch_size: int = 64, max_len: int | None = None
) -> torch.Tensor:
    """Logits [len(texts), labels] in eval mode, batches padded to their longest text; `max_len`
    None: the tokenizer's limit (the model's positions)."""
    model.eval()
    out: list[torch.Tensor] = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            encoded = tokenizer(
                list(texts[start : start + batch_size]),
                padding=True,
                truncation=True,
                max_length=max_len,
                return_tensors="pt",
            )
            out.append(model(**encoded).logits.float())
    return torch.cat(out) if out else torch.empty(0, len(LABELS))


def accuracy(predicted: Sequence[int], labels: Sequence[int]) -> float:
    return sum(int(p == y) for p, y in zip(predicted, labels, strict=True)) / max(1, len(labels))


def save(model: Any, tokenizer: Any, out: Path | str) -> Path:
    """`save_pretrained` of both: the folder a transformers user has."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_predictions(path: Path, texts: Sequence[str], labels: Sequence[int], logits: torch.Tensor) -> None:
    probabilities = torch.softmax(logits, dim=-1)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["sentence", "label", "predicted", *(f"p_{name}" for name in LABELS)])
        for text, label, row in zip(texts, labels, probabilities.tolist(), strict=True):
            best = max(range(len(row)), key=row.__getitem__)
            writer.writerow([text, LABELS[label], LABELS[best], *(f"{p:.6f}" for p in row)])


def steps_for(rows: int, batch_size: int, epochs: float) -> int:
    """Optimizer steps of `epochs` passes over `rows` (an epoch drops its last short batch)."""
    return max(1, math.floor(epochs * (rows // batch_size)))


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--model", help="the pretrained folder (config.json, weights, tokenizer)")
    p.add_argument("--train", help="training CSV")
    p.add_argument("--dev", help="CSV whose accuracy is read at the end")
    p.add_argument("--out", help="folder to save_pretrained the model and tokenizer into")
    p.add_argument("--evaluate", metavar="FOLDER", help="only read the accuracy of a saved folder on --dev")
    p.add_argument("--predictions", type=Path, help="write --dev's predictions here (CSV)")
    p.add_argument("--text-column", default="sentence")
    p.add_argument("--label-column", default="label")
    p.add_argument("--epochs", type=float, default=1.0, help="passes over --train (default: 1)")
    p.add_argument("--steps", type=int, help="optimizer steps instead of --epochs")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-len", type=int, default=64, help="training: tokens per text")
    p.add_argument(
        "--eval-max-len", type=int, help="evaluation: tokens per text (default: the model's limit)"
    )
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--warmup", type=float, default=0.06, help="share of the steps spent warming up")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--log-every", type=int, default=50, help="a progress line every N steps")
    p.add_argument(
        "--group-by-length",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="batches of similar lengths (transformers Trainer's group_by_length)",
    )
    args = p.parse_args(argv)
    if args.evaluate is None and not (args.model and args.train and args.out):
        p.error("--model, --train and --out are required unless --evaluate is given")
    if args.evaluate is not None and not args.dev:
        p.error("--evaluate needs --dev")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    torch.set_num_threads(args.threads)
    if args.evaluate is not None:
        tokenizer, model = load_classifier(args.evaluate)
    else:
        texts, labels = read_rows(args.train, args.text_column, args.label_column)
        steps = args.steps if args.steps is not None else steps_for(len(texts), args.batch_size, args.epochs)
        settings = FineTune(
            steps=steps,
            batch_size=args.batch_size,
            max_len=args.max_len,
            lr=args.lr,
            warmup=args.warmup,
            seed=args.seed,
            log_every=args.log_every,
            group_by_length=args.group_by_length,
        )
        epochs = steps * args.batch_size / len(texts)
        print(f"{len(texts)} rows, {steps} steps of {args.batch_size} ({epochs:.2f} epochs)")
        tokenizer, model = load_pretrained(args.model, seed=args.seed)
        stats = train(model, tokenizer, texts, labels, settings, log=lambda line: print(line, flush=True))
        print(f"trained: {stats.steps} steps in {stats.seconds:.0f} s")
        save(model, tokenizer, args.out)
        print(f"saved to {args.out}")
    if args.dev:
        texts, labels = read_rows(args.dev, args.text_column, args.label_column)
        started = time.perf_counter()
        logits = predict(model, tokenizer, texts, max_len=args.eval_max_len)
        seconds = time.perf_counter() - started
        score = accuracy(logits.argmax(-1).tolist(), labels)
        print(f"{args.dev}: accuracy {score:.4f} on {len(texts)} rows ({seconds:.1f} s)")
        if args.predictions is not None:
            write_predictions(args.predictions, texts, labels, logits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
