"""A long text's windows cover every token of it: each window is a run of the whole text's
tokens, neighbours share exactly the policy's stride, the first starts at the text's first
token and the last ends at its last, whatever the window, the stride and the text (words cut
into several word pieces at a window's edge included). The tokenizer is the wordpiece of the
tiny classifiers the serving tests import, read by the server's own `TextTokenizer`.
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
from tests.export.hf_classifiers import WORDS, bert_wordpiece, mpnet_wordpiece

# Known words, and words the vocabulary lacks (cut into letters: several pieces each).
VOCABULARY = (*WORDS, "unwatchable", "xylophone", "b4", "ok!")


@pytest.fixture(scope="module", params=["bert", "mpnet"])
def tokenizer_file(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    made: Tokenizer = bert_wordpiece() if request.param == "bert" else mpnet_wordpiece()
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
    docs = plan(windows, whole)
    full = [whole[0].ids[i] for i in text_positions(whole[0])]  # the text's tokens, no specials
    starts = docs.starts[0]
    pieces = [[w.ids[i] for i in text_positions(w)] for w in windows[0]]
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
    assert chars[-1][1] == len(text.rstrip())
    assert [c[0] for c in chars] == sorted(c[0] for c in chars)
