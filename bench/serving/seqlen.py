"""Cost against text length: texts of exactly T tokens, T from 8 to max_len, in raw onnxruntime at
batch 32 and through the service; and mixed lengths in batches of 32 bucketed or padded (in
process: the service has no setting to turn its bucketing off)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attnserve.service.bundle import read_bundle
from bench.serving import ceiling
from bench.serving.plan import Plan, lengths
from bench.serving.results import SeqLen
from bench.serving.sweep import NATIVE, closed_point
from bench.serving.texts import exact_length_texts
from kit.launch import attnserve

BATCH = 32


def measure(repository: Path, model: str, mixed: Sequence[str], plan: Plan) -> SeqLen:
    bundle = read_bundle(ceiling.bundle_dir(repository, model))
    result = SeqLen()
    by_length = {
        length: exact_length_texts(bundle.tokenizer_path, length, 64)
        for length in lengths(bundle.manifest.max_len, plan.seqlen_points)
    }
    result.raw_texts_per_s = ceiling.length_curve(bundle, by_length, BATCH, plan.ceiling_seconds)
    result.padding = ceiling.padding_rows(bundle, mixed, BATCH, plan.ceiling_seconds)
    with attnserve(repository) as server:
        for length, texts in by_length.items():
            result.service[length] = closed_point(
                server, "native", model, texts, 1, False, plan.seqlen_concurrency, plan, system=NATIVE
            )
    return result
