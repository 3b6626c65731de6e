"""Texts and prepared requests for the benchmark: the load test's length mix, or exact lengths.

The mix is the load test's (loadtest/workload.py): short, medium, long and over-length
sentences. `exact_length_texts` builds texts that the bundle's tokenizer turns into exactly
T tokens, for the sequence-length sweep.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer

from kit.load import Requests
from loadtest.protocol import NativeProtocol, V2Protocol, WireProtocol
from loadtest.workload import Call, Mix, ModelLimits, Workload

V2_OUTPUTS = ("LABEL", "PROBABILITIES")


def mixed_texts(count: int, max_len: int, seed: int = 0) -> list[str]:
    workload = Workload(Mix(), ModelLimits(max_len=max_len), (), seed=seed)
    return [workload.random_text() for _ in range(count)]


def exact_length_texts(tokenizer_path: Path, length: int, count: int, seed: int = 0) -> list[str]:
    """`count` texts of exactly `length` tokens (special tokens included) under this tokenizer."""
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.no_truncation()
    workload = Workload(Mix(), ModelLimits(max_len=max(length, 8)), (), seed=seed)
    extra = len(tokenizer.encode("car").ids) - 1  # tokens the post-processor adds ([CLS] ...)
    texts = []
    for _ in range(count):
        words = max(1, length - extra)
        text = workload.corpus.sentence(words)
        while len(tokenizer.encode(text).ids) > length and words > 1:  # a word split into pieces
            words -= 1
            text = workload.corpus.sentence(words)
        texts.append(text)
    got = {len(tokenizer.encode(text).ids) for text in texts}
    if got != {length}:
        raise ValueError(
            f"cannot build texts of exactly {length} tokens with this tokenizer (got {sorted(got)})"
        )
    return texts


def protocol_for(api: str, model: str, max_len: int, v2_outputs: Sequence[str] = V2_OUTPUTS) -> WireProtocol:
    limits = ModelLimits(max_len=max_len)
    if api == "native":
        return NativeProtocol(model, limits)
    return V2Protocol(model, limits, outputs=v2_outputs)


def prepared(
    api: str, model: str, texts: Sequence[str], texts_per_request: int, attention: bool, *,
    bodies: int = 64, v2_outputs: Sequence[str] = V2_OUTPUTS, check: bool = True,
) -> Requests:  # fmt: skip
    """`bodies` requests of `texts_per_request` texts each, taken in turn from `texts`."""
    protocol = protocol_for(api, model, 10**6, v2_outputs)
    calls = []
    for i in range(bodies):
        start = (i * texts_per_request) % len(texts)
        chosen = [texts[(start + j) % len(texts)] for j in range(texts_per_request)]
        calls.append(Call("bench", tuple(chosen), attention, None))
    first = calls[0]
    return Requests(
        method=protocol.method,
        bodies=[protocol.prepare(call).body for call in calls],
        texts_per_request=texts_per_request,
        check=(lambda reply: protocol.check(first, reply)) if check else None,
    )
