"""What the model itself costs per text, in CPU seconds, measured in this process.

A shared machine makes the server's own batch timings (wall time) overstate it, so the bundle's
session (one intra-op thread) runs the workload's texts at the server's mean batch size, with
the attention output, timed by `time.process_time`; tokenization stays in the server's share.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from attnserve.service.bundle import read_bundle
from bench.serving.ceiling import encode, session_for, tokenizer_for

RUNS_CPU_SECONDS = 0.3


@cache
def _session_and_tokenizer(bundle_dir: Path) -> tuple[object, object, bool]:
    bundle = read_bundle(bundle_dir)
    return session_for(bundle, 1), tokenizer_for(bundle), bundle.manifest.attention.kind != "none"


@cache
def model_cpu_per_text(bundle_dir: Path, texts: tuple[str, ...], batch: int) -> float:
    """CPU seconds of session.run per text at `batch` texts per run."""
    session, tokenizer, attention = _session_and_tokenizer(bundle_dir)
    names = ["logits", "attention"] if attention else ["logits"]
    groups: Sequence[tuple[str, ...]] = [
        tuple(texts[(i * batch + j) % len(texts)] for j in range(batch)) for i in range(8)
    ]
    feeds = [encode(tokenizer, group) for group in groups]  # type: ignore[arg-type]
    session.run(names, {"input_ids": feeds[0][0], "attention_mask": feeds[0][1]})  # type: ignore[attr-defined]
    runs, started = 0, time.process_time()
    while time.process_time() - started < RUNS_CPU_SECONDS:
        ids, mask = feeds[runs % len(feeds)]
        session.run(names, {"input_ids": ids, "attention_mask": mask})  # type: ignore[attr-defined]
        runs += 1
    return (time.process_time() - started) / (runs * batch)
