"""car-order's training steps per second: one process, against each batch split over several.

With P processes each takes every P-th row of a batch and they sum gradients over loopback
(one gloo all_reduce of a flat buffer), so all hold the same weights up to the order of
float additions; the table reports how far apart they end. Settings take turns in a round.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from attnserve.training.data.tasks import DEFAULTS, load_task
from attnserve.training.loop.batching import Split, batch_tensors, training_batches, word_dropout_augment
from attnserve.training.loop.trainer import TrainConfig, make_optimizer
from attnserve.training.models import build_model
from attnserve.training.run.pipeline import encode
from attnserve.training.text.tokenizer import UNK_ID, build_tokenizer
from bench import sections
from bench.render import markdown_table
from kit.ports import free_port

TASK = "car-order"
MAX_LEN = 64  # the transformer's default, which car-order's recipe keeps: the ids' width and the model's


def task_data(pairs: int) -> tuple[Split, dict[str, object], TrainConfig]:
    """car-order's training split, its model config and its trainer settings."""
    ds = load_task(TASK, seed=0, n_pairs=pairs)
    tokenizer = build_tokenizer([e.text for e in ds.train])
    config: dict[str, object] = {"vocab_size": tokenizer.get_vocab_size(), "num_classes": len(ds.labels),
                                 "max_len": MAX_LEN, **dict(DEFAULTS[TASK].model)}  # fmt: skip
    overrides: dict[str, Any] = dict(DEFAULTS[TASK].training)  # field names and values of TrainConfig
    return encode(tokenizer, ds.train, MAX_LEN, "head"), config, replace(TrainConfig(), **overrides)


def worker(rank: int, world: int, port: int, data: tuple[Split, dict[str, object], TrainConfig],
           steps: int, results: mp.Queue[tuple[float, np.ndarray]]) -> None:  # fmt: skip
    """Train `steps` steps (after 3 warm-up steps) as process `rank` of `world`; rank 0 reports."""
    split, config, cfg = data
    torch.set_num_threads(1)
    if world > 1:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = build_model("transformer", config)
    model.train()
    opt, _ = make_optimizer(model, cfg, steps=steps + 3)
    rng = np.random.default_rng(0)  # the same in every process: the same batches and word dropout
    plan = training_batches(split, cfg.batch_size, rng, by_length=True)
    augment = word_dropout_augment(cfg.word_dropout, UNK_ID, rng, set())

    def step(rows: np.ndarray) -> None:
        ids, mask, labels = batch_tensors(split, rows, torch.device("cpu"), augment=augment)  # [B, T]x2, [B]
        mine = slice(rank, None, world)
        opt.zero_grad(set_to_none=True)
        logits = model.logits(ids[mine], mask[mine])  # [B / world, C]
        # Summed over this share and divided by the whole batch: the shares add up to its mean.
        (F.cross_entropy(logits, labels[mine], reduction="sum") / len(rows)).backward()  # type: ignore[no-untyped-call]
        if world > 1:
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            flat = parameters_to_vector(grads)
            dist.all_reduce(flat)
            vector_to_parameters(flat, grads)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()

    try:
        for i in range(steps + 3):
            if i == 3:
                started = time.perf_counter()
            step(plan[i % len(plan)])
        seconds = time.perf_counter() - started
        if rank == 0:
            weights = parameters_to_vector(model.parameters()).detach().numpy()
            results.put((steps / seconds, weights))
    finally:
        if world > 1:
            dist.destroy_process_group()


def measure(args: argparse.Namespace) -> dict[int, tuple[list[float], float]]:
    """Steps per second per round for each process count, and the weights' largest difference
    from one process's after the same steps."""
    data = task_data(args.pairs)
    context = mp.get_context("fork")  # the children share the encoded data instead of pickling it
    rates: dict[int, list[float]] = {n: [] for n in (1, args.processes)}
    apart: dict[int, float] = {}
    for round_ in range(args.rounds):
        reference: np.ndarray | None = None
        for world in rates:
            results: mp.Queue[tuple[float, np.ndarray]] = context.Queue()
            port = free_port()
            procs = [context.Process(target=worker, args=(r, world, port, data, args.steps, results))
                     for r in range(world)]  # fmt: skip
            for p in procs:
                p.start()
            rate, weights = _result(results, procs, world)
            for p in procs:
                p.join(timeout=60)
                if p.exitcode != 0:
                    raise RuntimeError(f"a training process of {world} exited with {p.exitcode}")
            rates[world].append(rate)
            reference = weights if reference is None else reference
            apart[world] = float(np.abs(weights - reference).max())
            print(f"round {round_ + 1}/{args.rounds}  {world} process(es): {rate:.1f} steps/s",
                  file=sys.stderr, flush=True)  # fmt: skip
    return {n: (r, apart[n]) for n, r in rates.items()}


def _result(results: mp.Queue[tuple[float, np.ndarray]], procs: Sequence[mp.process.BaseProcess],
            world: int) -> tuple[float, np.ndarray]:  # fmt: skip
    """Rank 0's report; a process that dies first ends the wait (its peers would wait on it)."""
    deadline, problem = time.monotonic() + 600, f"{world} training process(es) gave no figure within 600 s"
    while time.monotonic() < deadline:
        try:
            return results.get(timeout=1)
        except queue.Empty:
            if failed := [p.exitcode for p in procs if p.exitcode not in (None, 0)]:
                problem = f"a training process of {world} exited with {failed[0]}"
                break
    for p in procs:
        p.kill()
    raise RuntimeError(problem)


def render(result: dict[int, tuple[list[float], float]], steps: int) -> str:
    one = statistics.median(result[1][0])
    rows = [[str(n), f"{statistics.median(rates):.1f}", ", ".join(f"{r:.1f}" for r in rates),
             f"{statistics.median(rates) / one:.2f}x", f"{apart:.1e}"]
            for n, (rates, apart) in result.items()]  # fmt: skip
    header = ["processes", "steps/s (median)", "rounds", "speed-up", "weights apart from 1 process"]
    title = f"car-order's recipe, {steps} steps of 128 texts per round, one torch thread a process."
    return "\n".join([title, "", *markdown_table(header, rows, "rrlrr")]) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = sections.parser("data-parallel", __doc__)
    parser.add_argument("--steps", type=int, default=90, help="timed steps per setting and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--processes", type=int, default=2, help="the split setting's process count")
    parser.add_argument("--pairs", type=int, default=DEFAULTS[TASK].size, help="car-order pairs generated")
    args = parser.parse_args(argv)
    sections.require_at_least(parser, args, {"steps": 1, "rounds": 1, "processes": 2, "pairs": 100})
    print(render(measure(args), args.steps))
    return 0
