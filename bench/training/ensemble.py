"""How an average of several trained runs reads a built-in task, against each run alone.

python -m bench ensemble runs/m0 runs/m1 runs/m2

The runs must share task and data seed (`attnserve-train --data-seed`), so they were trained
and are tested on the same draw of data. Nothing here is served: a bundle holds one model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer

from attnserve.training.data import Example, load_task
from attnserve.training.run.checkpoint import LoadedRun, load_run
from attnserve.training.text.tokenizer import encode_batch, load_tokenizer
from bench import sections
from bench.render import markdown_table


def probabilities(run: LoadedRun, tokenizer: Tokenizer, texts: list[str]) -> torch.Tensor:
    """[N, C] class probabilities of `run` (whose tokenizer is `tokenizer`) for `texts`."""
    encoded = encode_batch(tokenizer, texts, run.max_len, run.truncation)
    with torch.no_grad():
        ids, mask = torch.from_numpy(encoded.input_ids), torch.from_numpy(encoded.attention_mask)
        return run.model.logits(ids, mask).softmax(-1)  # [N, C]


def scores(runs: list[LoadedRun], splits: dict[str, list[Example]]) -> dict[str, list[float]]:
    """Per split: each run's accuracy, then the accuracy of their mean probabilities."""
    tokenizers = [load_tokenizer(run.tokenizer_path) for run in runs]  # read once, used per split
    table = {}
    for name, examples in splits.items():
        gold = torch.tensor([e.label for e in examples])  # [N]
        texts = [e.text for e in examples]
        probs = [probabilities(run, tok, texts) for run, tok in zip(runs, tokenizers, strict=True)]
        mean = torch.stack(probs).mean(0)  # [N, C]
        table[name] = [float((p.argmax(-1) == gold).float().mean()) for p in [*probs, mean]]
    return table


def _data_seed(run: LoadedRun) -> int:
    if not isinstance(seeds := run.metrics.get("seeds"), dict) or "data" not in seeds:
        raise ValueError(f"{run.run_dir}: no data seed recorded (trained before --data-seed existed)")
    return int(seeds["data"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = sections.parser("ensemble", __doc__)
    parser.add_argument("runs", nargs="+", type=Path, help="run directories of attnserve-train")
    limit = "score only the first N texts of each split (0: all of them)"
    parser.add_argument("--limit", type=int, default=0, help=limit)
    args = parser.parse_args(argv)
    try:
        runs = [load_run(path) for path in args.runs]
        tasks, seeds = {run.task for run in runs}, {_data_seed(run) for run in runs}
    except (FileNotFoundError, ValueError) as exc:
        raise sections.Refused(str(exc)) from None
    if len(tasks) > 1 or len(seeds) > 1:
        raise sections.Refused(f"the runs differ in task or data seed ({tasks}, {seeds})")
    dataset = load_task(tasks.pop(), seed=seeds.pop())
    splits = {"test": dataset.test, **{k: v for k, v in dataset.extra.items() if v}}
    if args.limit > 0:
        splits = {name: examples[: args.limit] for name, examples in splits.items()}
    header = ["split", *(path.name for path in args.runs), "mean of probabilities"]
    rows = [
        [f"{split} ({len(splits[split])})", *(f"{v:.3f}" for v in row)]
        for split, row in scores(runs, splits).items()
    ]
    print("\n".join(markdown_table(header, rows, "l" * len(header))))
    return 0
