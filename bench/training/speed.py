"""Training throughput of the default transformer on long texts: the old path against the new.

Every variant trains the same model from the same weights with the trainer's own step; they
take turns in rounds and a figure is a variant's median, per wall-clock and per CPU second.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np
import torch

from attnserve.training.data.encoding import encode_texts
from attnserve.training.loop.batching import Split, batch_tensors, training_batches, word_dropout_augment
from attnserve.training.loop.threads import Threads, training_probe
from attnserve.training.loop.trainer import TrainConfig, make_optimizer, train_step
from attnserve.training.models import build_model
from attnserve.training.text.tokenizer import UNK_ID, build_tokenizer
from bench import sections
from bench.render import markdown_table
from bench.training.long_texts import long_texts

NEW = TrainConfig()  # the defaults: grouped by length, fused attention, micro-batches, timed threads
ONE = replace(NEW, threads=1, max_batch_tokens=0)  # the old path: one thread, whole batches
SPLIT = f"micro-batches of {NEW.max_batch_tokens} tokens"
# (name, settings): the first is the path before this work, the last the defaults.
VARIANTS: list[tuple[str, TrainConfig]] = [
    ("old: every batch padded to max_len, written-out attention",
     replace(ONE, group_by_length=False, pad_to_max_len=True, fused_attention=False)),
    ("random batches padded to their longest row, written-out attention",
     replace(ONE, group_by_length=False, fused_attention=False)),
    ("batches grouped by length, written-out attention", replace(ONE, fused_attention=False)),
    ("random batches padded to their longest row, fused attention", replace(ONE, group_by_length=False)),
    ("batches grouped by length, fused attention, 1 thread", ONE),
    (f"the same in {SPLIT}", replace(ONE, max_batch_tokens=NEW.max_batch_tokens)),
    (f"batches grouped by length, fused attention, {SPLIT}, 2 threads", replace(NEW, threads=2)),
    (f"new (the defaults): grouped, fused, {SPLIT}, threads of a timed probe step", NEW),
]  # fmt: skip


@dataclass
class Variant:
    name: str
    settings: dict[str, object]
    wall: list[float] = field(default_factory=list)  # texts per wall-clock second, per round
    cpu: list[float] = field(default_factory=list)  # texts per CPU second, per round
    tokens: list[float] = field(default_factory=list)  # padded width per text, per round
    counts: list[int] = field(default_factory=list)  # the thread counts the variant ran with

    def summary(self) -> dict[str, object]:
        return {"name": self.name, "settings": self.settings, "texts_per_s": statistics.median(self.wall),
                "texts_per_cpu_s": statistics.median(self.cpu), "padded_tokens": statistics.mean(self.tokens),
                "threads": "/".join(map(str, self.counts)),  # "1/2": both, chosen by timing
                "rounds": {"wall": self.wall, "cpu": self.cpu}}  # fmt: skip


class TurnClock:
    """Seconds one variant has spent on its own turns: a run re-times its threads after a minute
    of its own training, and on the wall clock that minute would pass at nearly every turn."""

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self.spent, self._now = 0.0, now
        self._since: float | None = None

    def start(self) -> None:
        self._since = self._now()

    def stop(self) -> None:
        self.spent, self._since = self(), None

    def __call__(self) -> float:
        return self.spent + (0.0 if self._since is None else self._now() - self._since)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    texts, labels = long_texts(args.rows, args.seed)
    tokenizer = build_tokenizer(texts)
    encoded = encode_texts(tokenizer, texts, args.max_len)
    split = Split(encoded.input_ids, encoded.lengths, np.asarray(labels, dtype=np.int64))
    config = {"vocab_size": tokenizer.get_vocab_size(), "max_len": args.max_len}
    torch.manual_seed(args.seed)
    initial = build_model("transformer", config).state_dict()
    variants, runs, device = [Variant(name, asdict(cfg)) for name, cfg in VARIANTS], [], torch.device("cpu")
    for _, cfg in VARIANTS:
        model = build_model("transformer", config)
        model.load_state_dict(initial)
        model.train()
        rng = np.random.default_rng(args.seed)
        opt, _ = make_optimizer(model, cfg, steps=len(split) // cfg.batch_size)
        plan = training_batches(split, cfg.batch_size, rng, by_length=cfg.group_by_length)
        augment = word_dropout_augment(cfg.word_dropout, UNK_ID, rng, set())
        clock = TurnClock()
        threads = Threads(cfg.threads, partial(training_probe, model, split, cfg), clock=clock)
        threads.start()
        runs.append((cfg, model, opt, plan, augment, threads, clock))
    for round_ in range(args.rounds):
        for (cfg, model, opt, plan, augment, threads, clock), variant in zip(runs, variants, strict=True):
            clock.start()
            torch.set_num_threads(threads.count)  # variants take turns: each sets its own count again
            pad_to = args.max_len if cfg.pad_to_max_len else None
            start = round_ * (args.steps + 1)  # every round takes the next batches of the epoch
            batches = [plan[i % len(plan)] for i in range(start, start + args.steps + 1)]
            train_step(model, opt, batch_tensors(split, batches[0], device, pad_to=pad_to), cfg)  # warm-up
            texts_done = tokens = 0
            counts = {threads.count}
            wall, cpu = time.perf_counter(), time.process_time()
            for idx in batches[1:]:
                counts.add(threads.between_steps())  # as the trainer does (timed again when due)
                batch = batch_tensors(split, idx, device, pad_to=pad_to, augment=augment)
                train_step(model, opt, batch, cfg)
                texts_done, tokens = texts_done + len(idx), tokens + batch[0].numel()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            clock.stop()
            variant.wall.append(texts_done / wall)
            variant.cpu.append(texts_done / cpu)
            variant.tokens.append(tokens / texts_done)
            variant.counts = sorted(counts | set(variant.counts))
            print(f"round {round_ + 1}/{args.rounds}  {texts_done / wall:7.1f} texts/s  {variant.name}",
                  file=sys.stderr, flush=True)  # fmt: skip
    return {
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "rows": args.rows, "max_len": args.max_len, "steps": args.steps, "rounds": args.rounds,
        "vocab": config["vocab_size"], "params": sum(p.numel() for p in runs[0][1].parameters()),
        "mean_tokens": float(split.lengths.mean()),
        "truncated_share": float((split.lengths >= args.max_len).mean()),
        "torch": torch.__version__, "variants": [v.summary() for v in variants],
    }  # fmt: skip


def render(result: dict[str, Any]) -> str:
    variants = result["variants"]
    old = variants[0]["texts_per_s"]
    lines = [
        f"Default transformer ({result['params']:,} parameters, vocabulary {result['vocab']:,}), "
        f"{result['rows']:,} texts of {result['mean_tokens']:.0f} tokens on average at max_len "
        f"{result['max_len']} ({result['truncated_share']:.0%} truncated); batch 64, "
        f"{result['steps']} steps x {result['rounds']} rounds per variant, torch {result['torch']}.",
        "",
    ]
    header = ["path", "threads", "texts/s", "texts per CPU s", "padded tokens", "speed-up",
              "32,000-text epoch"]  # fmt: skip
    rows = [[v["name"], str(v["threads"]), f"{v['texts_per_s']:.1f}", f"{v['texts_per_cpu_s']:.1f}",
             f"{v['padded_tokens']:.0f}", f"{v['texts_per_s'] / old:.2f}x",
             f"{32_000 / v['texts_per_s']:.0f} s"] for v in variants]  # fmt: skip
    return "\n".join([*lines, *markdown_table(header, rows)]) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = sections.parser("training-speed", __doc__, json_out=True)
    parser.add_argument("--rows", type=int, default=32_000, help="texts in the corpus")
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per variant and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sections.require_at_least(parser, args, {"rows": 1, "steps": 1, "rounds": 1})
    result = measure(args)
    sections.write_json(args.out, result)
    print(render(result))
    return 0
