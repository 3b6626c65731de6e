"""A long text's windows cover every token of it: each window is a run of the whole text's
tokens, neighbours share exactly the policy's stride, the first starts at the text's first
token and the last ends at its last, whatever the window, the stride and the text (words cut
into several word pieces at a window's edge included); and they are tokenizers' own overflow
windows, token for token, with the whole text's characters (where tokenizers leaves the
overflow windows' byte-level offsets untrimmed, the server trims them as it trims the first).
The tokenizers are those of the tiny classifiers the serving tests import (wordpiece,
byte-level BPE, unigram), read by the server's own `TextTokenizer`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from attnserve.service.bundle import LongTexts
from attnserve.service.engine.models.tokenization import TextTokenizer
from attnserve.service.engine.request.windows import plan, text_positions
from tests.export.hf_classifiers import WORDS, bert_wordpiece, mpnet_wordpiece, roberta_bpe, xlmr_unigram

# Known words, and words the vocabulary lacks (cut into letters: several pieces each).
VOCABULARY = (*WORDS, "unwatchable", "xylophone", "b4", "ok!")


MAKERS = {
    "bert": bert_wordpiece,
    "mpnet": mpnet_wordpiece,
    "roberta": lambda: roberta_bpe()[0],
    "xlmr": xlmr_unigram,
}


@pytest.fixture(scope="module", params=sorted(MAKERS))
def tokenizer_file(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    made: Tokenizer = MAKERS[request.param]()
    path = tmp_path_factory.mktemp("cover") / "tokenizer.json"
    made.save(str(path))
    return path


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, int, int]:
    words = draw(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=160))
    window = draw(st.integers(min_value=3, max_value=24))
    stride = draw(st.integers(min_value=0, max_value=window - 3))
    return " ".join(words), window, stride


@settings(max_examples=150, deadline=None)
@given(case=cases())
def test_windows_cover_every_token_sharing_the_stride(
    tokenizer_file: Path, case: tuple[str, int, int]
) -> None:
    text, window, stride = case
    policy = LongTexts(window=window, stride=stride, max_windows=4096)
    reader = TextTokenizer(tokenizer_file, 64, reject_long=False, max_text_chars=10**6, windows=policy)
    windows, whole = reader.encode_windows([text])
    oracle = Tokenizer.from_file(str(tokenizer_file))
    oracle.enable_truncation(max_length=window, stride=stride)
    first = oracle.encode(text)
    assert [(w.ids, w.special_tokens_mask) for w in windows[0]] == [
        (w.ids, w.special_tokens_mask) for w in (first, *first.overflowing)
    ]
    docs = plan(windows, whole, stride)
    # The text's tokens (no specials) with their characters, and each window's.
    full = [(whole[0].ids[i], whole[0].offsets[i]) for i in text_positions(whole[0])]
    starts = docs.starts[0]
    pieces = [[(w.ids[i], w.offsets[i]) for i in text_positions(w)] for w in windows[0]]
    assert all(len(w.ids) <= window for w in windows[0])
    assert starts[0] == 0
    for k, (start, piece) in enumerate(zip(starts, pieces, strict=True)):
        assert piece == full[start : start + len(piece)], f"window {k} is not a run of the text's tokens"
        if k + 1 < len(pieces):
            assert len(piece) == window - 2  # only the last window may be short
            assert starts[k + 1] == start + len(piece) - stride  # neighbours share the stride
    assert starts[-1] + len(pieces[-1]) == len(full)  # nothing lost after the last window
    # Each window's characters are its first and last token's, so they cover the text in order.
    chars = docs.chars[0]
    assert chars[0][0] == whole[0].offsets[text_positions(whole[0])[0]][0]
    last = text_positions(whole[0])[-1]
    assert chars[-1][1] == whole[0].offsets[last][1]
    assert [c[0] for c in chars] == sorted(c[0] for c in chars)
