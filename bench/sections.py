"""The sections of `python -m bench`: what each measures, the module whose `main(argv)` runs it
(imported only then: a serving-only install never imports torch) and the flags `--tiny` stands
for (seconds of work, figures that mean nothing, every output written; later flags win)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.launch import ROOT


class Refused(Exception):
    """A run that cannot start (no such model, a missing tool): `python -m bench` prints the
    message and exits with status 2 before anything was measured."""


@dataclass(frozen=True)
class Section:
    name: str
    module: str
    summary: str
    tiny: tuple[str, ...]  # the flags `--tiny` stands for


SERVING_SECTIONS = ("ceiling", "native", "v2", "naive", "mlserver", "memory", "seqlen", "profile")

SECTIONS: tuple[Section, ...] = (
    Section("peers", "bench.serving.peers",
            "attnserve beside the gRPC floor, PyTriton and MLServer: calls/s, latency, CPU per call",
            ("--levels", "2", "--seconds", "0.2", "--systems", "floor,v2-w1,native-w1",
             "--workloads", "text16", "--modes", "unary")),
    Section("inprocess", "bench.serving.inprocess",
            "attnserve's own CPU per call with gRPC taken out: the engine and the V2 handler",
            ("--levels", "1,4", "--calls", "60")),
    Section("http", "bench.serving.http",
            "the HTTP port beside gRPC: native gRPC, the JSON API and V2 REST on one server",
            ("--seconds", "0.2", "--rounds", "1", "--concurrency", "1", "--per-call", "1", "32")),
    Section("encoder", "bench.serving.encoder",
            "a pretrained encoder served, beside raw onnxruntime on its ONNX and the expert's int8 graph",
            ("--concurrency", "1,2", "--per-call", "4", "--seconds", "0.2", "--warmup", "0.1")),
    Section("exporters", "bench.training.exporters",
            "the ONNX exporters compared by the onnxruntime latency of their graphs",
            ("--rounds", "1", "--budget", "0.02", "--exporter", "torchscript")),
    Section("training-speed", "bench.training.speed",
            "training throughput of the default transformer on long texts, old path against new",
            ("--rows", "300", "--max-len", "64", "--steps", "1", "--rounds", "1")),
    Section("training-memory", "bench.training.memory",
            "peak RSS of a real training run on a large long-text corpus, against its budget",
            ("--rows", "1500", "--max-len", "64", "--max-seconds", "1")),
    Section("data-parallel", "bench.training.data_parallel",
            "car-order training steps per second, one process against a batch split over two",
            ("--steps", "2", "--rounds", "1", "--pairs", "200")),
    Section("explain", "bench.serving.explain",
            "each explanation's faithfulness (ERASER comprehensiveness, sufficiency) and cost per text",
            ("--count", "6", "--steps", "4", "--budget", "8")),
    Section("ensemble", "bench.training.ensemble",
            "each trained run's accuracy on a built-in task beside the mean of their probabilities",
            ("--limit", "64")),
)  # fmt: skip
BY_NAME: Mapping[str, Section] = {section.name: section for section in SECTIONS}


def expand_tiny(section: Section, argv: list[str]) -> list[str]:
    if "--tiny" not in argv:
        return argv
    return [*section.tiny, *(arg for arg in argv if arg != "--tiny")]


def listing() -> str:
    lines = [
        "serving suite: python -m bench [--tiny|--quick] [--sections SECTIONS]",
        f"  sections: {', '.join(SERVING_SECTIONS)}",
        "",
        "sections with a command of their own: python -m bench NAME [--tiny] [flags]",
    ]
    for section in SECTIONS:
        lines += [f"  {section.name:<16} {section.summary}", f"  {'':<16} --tiny = {' '.join(section.tiny)}"]
    return "\n".join(lines)


def parser(
    name: str, doc: str | None, served: bool = False, json_out: bool = False
) -> argparse.ArgumentParser:
    """`python -m bench NAME`'s parser: the module docstring's first paragraph, defaults in --help;
    `served` adds the --repository and --model every serving section reads, `json_out` an --out
    for `write_json`."""
    made = argparse.ArgumentParser(
        prog=f"python -m bench {name}".rstrip(), description=(doc or "").split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )  # fmt: skip
    if served:
        made.add_argument("--repository", type=Path, default=ROOT / "models", help="model repository")
        made.add_argument("--model", default="car-order", help="model name")
    if json_out:
        made.add_argument("--out", type=Path, help="also write every figure here as JSON")
    return made


def write_json(path: Path | None, document: Any) -> None:
    """A section's figures at `path` (its --out), when one was given."""
    if path is not None:
        path.write_text(json.dumps(document, indent=2) + "\n")


def ints(text: str) -> list[int]:
    """`1,8,32` -> [1, 8, 32]."""
    return [int(item) for item in text.split(",") if item]


def subset(parser: argparse.ArgumentParser, text: str, flag: str, allowed: Sequence[str]) -> list[str]:
    """The comma-separated items of `text`, exiting with status 2 on one not in `allowed`."""
    items = [item for item in text.split(",") if item]
    if unknown := set(items) - set(allowed):
        parser.error(f"--{flag}: unknown {', '.join(sorted(unknown))}; choose from {', '.join(allowed)}")
    return items


def require_at_least(
    parser: argparse.ArgumentParser, args: argparse.Namespace, least: Mapping[str, int]
) -> None:
    for flag, bound in least.items():
        if getattr(args, flag) < bound:
            parser.error(f"--{flag} must be at least {bound}")
