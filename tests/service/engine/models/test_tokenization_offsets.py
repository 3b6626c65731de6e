"""Server-side tokenization with a BERT-style tokenizer: the template's [CLS]/[SEP] survive
truncation, and every token's offsets index the request text as Python does."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

from attnserve.service.engine.models.tokenization import EncodedTexts, TextTokenizer
from attnserve.service.errors import InvalidArgument
from tests.support.tiny_bert import make_tiny_bert


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("bert")) / "tokenizer.json"


def _encoder(path: Path, max_len: int = 64, *, reject_long: bool = False) -> TextTokenizer:
    return TextTokenizer(path, max_len, reject_long=reject_long, max_text_chars=10_000)


def test_offsets_index_the_text_in_code_points(tokenizer_file: Path) -> None:
    text = "😀 The café plot was superb!"  # an astral emoji: one code point, two UTF-16 units
    encoded = _encoder(tokenizer_file).encode([text])
    tokens, offsets, special = encoded.row(0)
    assert len(tokens) == len(offsets) == len(special)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert special == [True] + [False] * (len(tokens) - 2) + [True]
    assert offsets[0] == offsets[-1] == (0, 0)
    assert tokens[1] == "[UNK]" and offsets[1] == (0, 1)  # the emoji
    for token, (start, end) in zip(tokens[2:-1], offsets[2:-1], strict=True):
        # What BERT's normalizer made of those characters: lower case, accents stripped.
        read = "".join(c for c in unicodedata.normalize("NFD", text[start:end].lower()) if c.isascii())
        assert read == token.removeprefix("##"), (token, text[start:end])
    cafe = [span for token, span in zip(tokens, offsets, strict=True) if 6 <= span[0] < 10]
    assert text[cafe[0][0] : cafe[-1][1]] == "café"


def test_a_long_text_is_cut_to_max_len_and_keeps_its_sep(tokenizer_file: Path) -> None:
    text = " ".join(["the plot was superb"] * 40)
    encoded = _encoder(tokenizer_file, max_len=10).encode([text, "the plot"])
    assert encoded.lengths == [10, 4] and encoded.truncated == [True, False]
    tokens, _, special = encoded.row(0)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and tokens == encoded.tokens(0)
    assert special == [True] + [False] * 8 + [True]
    with pytest.raises(InvalidArgument, match="max_len of 10"):
        _encoder(tokenizer_file, max_len=10, reject_long=True).encode([text])


def test_a_special_token_typed_in_the_text_is_read_from_it(tokenizer_file: Path) -> None:
    text = "the [SEP] plot"
    encoded = _encoder(tokenizer_file).encode([text])
    tokens, offsets, special = encoded.row(0)
    assert tokens == ["[CLS]", "the", "[SEP]", "plot", "[SEP]"]
    assert special == [True, False, False, False, True]
    assert text[slice(*offsets[2])] == "[SEP]"


def test_rows_of_ids_have_no_offsets() -> None:
    rows = EncodedTexts.from_ids([[2, 5, 3]])
    assert rows.tokens(0) == [] and rows.row(0) == ([], [], [])
