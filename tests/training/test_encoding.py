"""Chunked encoding into one preallocated matrix gives the ids the tokenizer gives."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from attnserve.training.data.encoding import encode_texts
from attnserve.training.text.tokenizer import TRUNCATION_SIDES, build_tokenizer, encode_batch

WORDS = ["the", "a", "white", "black", "car", "is", "on", "left", "right", "of", "and", "near", "park"]


def texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 30))) + "." for _ in range(n)]


@pytest.mark.parametrize("truncation", TRUNCATION_SIDES)
@pytest.mark.parametrize("add_cls", [False, True])
@pytest.mark.parametrize("chunk_rows", [1, 7, 4096])
def test_same_ids_as_encode_batch_whatever_the_chunk_size(
    add_cls: bool, chunk_rows: int, truncation: str
) -> None:
    corpus = [*texts(200), "", "unseenword another", "!!!"]
    tok = build_tokenizer(corpus[:150], add_cls=add_cls)
    max_len = 20
    got = encode_texts(tok, corpus, max_len, truncation, chunk_rows=chunk_rows)
    want = encode_batch(tok, corpus, max_len, truncation)
    assert got.input_ids.shape == (len(corpus), max_len) and got.input_ids.dtype == np.int32
    assert np.array_equal(got.lengths, want.lengths)
    width = want.input_ids.shape[1]
    assert np.array_equal(got.input_ids[:, :width], want.input_ids)
    assert (got.input_ids[:, width:] == 0).all()
    assert got.truncated == sum(want.truncated)
    assert got.truncated > 0 and (got.full_lengths >= got.lengths).all()
    words = [len(re.findall(r"\w+", t)) for t in corpus]
    assert got.full_lengths.tolist() == [n + int(add_cls) for n in words]


def test_empty_input_and_bad_arguments() -> None:
    tok = build_tokenizer(texts(10), add_cls=True)
    empty = encode_texts(tok, [], 8)
    assert empty.input_ids.shape == (0, 8) and empty.truncated == 0
    with pytest.raises(ValueError, match="max_len must exceed the 1 special token"):
        encode_texts(tok, ["a"], 1)
    with pytest.raises(TypeError, match="sequence of texts"):
        encode_texts(tok, "the car", 8)
    with pytest.raises(ValueError, match="truncation must be one of"):
        encode_texts(tok, ["a"], 8, "middle")
    with pytest.raises(ValueError, match="chunk_rows"):
        encode_texts(tok, ["a"], 8, chunk_rows=0)
