from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from attnserve.training.data import load_task, words
from attnserve.training.text.tokenizer import (
    CLS_ID,
    CLS_TOKEN,
    PAD_ID,
    UNK_ID,
    UNK_TOKEN,
    build_tokenizer,
    encode_batch,
    has_cls,
    load_tokenizer,
    save_tokenizer,
)
from attnserve.training.text.vocabulary import KINDS

TEXTS = ["The white car is on the left.", "The black car is on the right!", "Hello, world", "hello again"]


def test_special_ids_and_vocabulary() -> None:
    tok = build_tokenizer(TEXTS)
    assert (tok.token_to_id("[PAD]"), tok.token_to_id("[UNK]")) == (PAD_ID, UNK_ID) == (0, 1)
    assert tok.token_to_id(CLS_TOKEN) is None and not has_cls(tok)
    vocab = set(tok.get_vocab()) - {"[PAD]", "[UNK]"}
    assert vocab == {"the", "white", "black", "car", "is", "on", "left", "right", "hello", "world", "again"}
    with_cls = build_tokenizer(TEXTS, add_cls=True)
    assert with_cls.token_to_id(CLS_TOKEN) == CLS_ID == 2 and has_cls(with_cls)


def test_normalisation_lowercases_and_strips_punctuation() -> None:
    tok = build_tokenizer(["hello world dont car white black"])
    enc = encode_batch(tok, ["HeLLo,   WORLD!!", "Don't", "ｃａｒ (white/black)", "¿hello?"], max_len=16)
    assert enc.tokens == [["hello", "world"], ["dont"], ["car", "white", "black"], ["hello"]]
    assert UNK_ID not in enc.input_ids


def test_unknown_words_become_unk_and_min_frequency_applies() -> None:
    tok = build_tokenizer(["a a b", "a c"], min_frequency=2)
    enc = encode_batch(tok, ["a b c zebra"], max_len=8)
    assert enc.tokens == [["a", "[UNK]", "[UNK]", "[UNK]"]]
    assert enc.input_ids.tolist() == [[tok.token_to_id("a"), UNK_ID, UNK_ID, UNK_ID]]
    with pytest.raises(ValueError, match="min_frequency=5"):
        build_tokenizer(["a a b"], min_frequency=5)
    with pytest.raises(ValueError, match="zero texts"):
        build_tokenizer([])


def test_padding_to_batch_longest_and_truncation_flags() -> None:
    tok = build_tokenizer(TEXTS)
    enc = encode_batch(tok, ["hello", "the white car is on the left", ""], max_len=64)
    assert enc.input_ids.shape == (3, 7) and enc.input_ids.dtype == np.int64
    assert enc.attention_mask.dtype == np.int64
    assert enc.lengths.tolist() == [1, 7, 0]
    assert enc.truncated == [False, False, False]
    assert np.array_equal(enc.attention_mask, (np.arange(7) < enc.lengths[:, None]).astype(np.int64))
    assert np.all(enc.input_ids[enc.attention_mask == 0] == PAD_ID)
    assert enc.tokens == [["hello"], ["the", "white", "car", "is", "on", "the", "left"], []]

    short = encode_batch(tok, ["the white car is on the left", "hello world"], max_len=4)
    assert short.input_ids.shape == (2, 4)
    assert short.truncated == [True, False]
    assert short.tokens[0] == ["the", "white", "car", "is"]
    assert short.lengths.tolist() == [4, 2]


def test_cls_is_first_and_counts_towards_max_len() -> None:
    tok = build_tokenizer(TEXTS, add_cls=True)
    enc = encode_batch(tok, ["the white car is on the left", "hello", ""], max_len=5)
    assert enc.input_ids.shape == (3, 5)
    assert np.all(enc.input_ids[:, 0] == CLS_ID)
    assert enc.tokens[0] == ["[CLS]", "the", "white", "car", "is"]
    assert enc.truncated == [True, False, False]
    assert enc.lengths.tolist() == [5, 2, 1]
    with pytest.raises(ValueError, match="max_len must exceed"):
        encode_batch(tok, ["hello"], max_len=1)


def test_empty_batch_and_single_string_argument() -> None:
    tok = build_tokenizer(TEXTS)
    enc = encode_batch(tok, [], max_len=8)
    assert enc.input_ids.shape == (0, 0) and enc.tokens == []
    with pytest.raises(TypeError, match="sequence of texts"):
        encode_batch(tok, "hello", max_len=8)


@pytest.mark.parametrize("add_cls", [False, True])
def test_saved_file_loads_with_plain_tokenizers(tmp_path: Path, add_cls: bool) -> None:
    tok = build_tokenizer(TEXTS, add_cls=add_cls)
    batch = ["The WHITE car, on the left?", "hello unknown-word", "right"]
    before = encode_batch(tok, batch, max_len=16)  # sets padding and truncation on tok
    path = save_tokenizer(tok, tmp_path / "run" / "tokenizer.json")
    stored = json.loads(path.read_text())
    assert stored["padding"] is None and stored["truncation"] is None

    plain = Tokenizer.from_file(str(path))  # what the service does: no code from this package
    rows = [e.ids for e in plain.encode_batch(batch)]
    unpadded = zip(before.input_ids.tolist(), before.lengths.tolist(), strict=True)
    assert rows == [ids[:n] for ids, n in unpadded]
    assert [e.tokens for e in plain.encode_batch(batch)] == before.tokens
    assert before.tokens[1][-2:] == ["[UNK]", "[UNK]"]
    assert all((t[0] == CLS_TOKEN) == add_cls for t in before.tokens)

    again = encode_batch(load_tokenizer(path), batch, max_len=16)
    assert np.array_equal(again.input_ids, before.input_ids) and again.truncated == before.truncated


def test_load_refuses_missing_broken_or_foreign_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="tokenizer file not found"):
        load_tokenizer(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ValueError, match="not a valid tokenizers JSON"):
        load_tokenizer(broken)
    foreign = tmp_path / "foreign.json"
    doc = json.loads(build_tokenizer(TEXTS).to_str())
    vocab = doc["model"]["vocab"]
    vocab["[PAD]"], vocab["[UNK]"] = vocab["[UNK]"], vocab["[PAD]"]
    foreign.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"\[PAD\] must have id 0"):
        load_tokenizer(foreign)


@pytest.mark.parametrize("kind", KINDS)
def test_car_order_training_vocabulary_covers_training_texts(kind: str) -> None:
    ds = load_task("car-order", n_pairs=200)
    tok = build_tokenizer([ex.text for ex in ds.train], kind=kind)
    enc = encode_batch(tok, [ex.text for ex in ds.train], max_len=64)
    assert not any(enc.truncated)
    assert not np.any(enc.input_ids == UNK_ID)
    # Training words are whole tokens for every kind (apostrophes vanish: "there's" is one word).
    assert enc.lengths.tolist() == [len(words(ex.text.replace("'", ""))) for ex in ds.train]


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_subword_kinds_split_unseen_words_into_seen_pieces(kind: str) -> None:
    texts = ["the white car is left of the black car", "the leftmost car", "most cars are parked"]
    tok = build_tokenizer(texts * 3, kind=kind)
    assert (tok.token_to_id("[PAD]"), tok.token_to_id("[UNK]")) == (PAD_ID, UNK_ID)
    enc = encode_batch(tok, ["The WHITE automobile, left of the car!", "zq", "données"], max_len=32)
    first = enc.tokens[0]
    assert first[:2] == ["the", "white"] and first[-4:] == ["left", "of", "the", "car"]
    pieces = first[2:-4]  # "automobile" was never seen: pieces, not [UNK]
    assert len(pieces) > 1 and UNK_TOKEN not in pieces
    assert pieces[0] == "a" or not pieces[0].startswith("##")
    assert all(p.startswith("##") for p in pieces[1:])
    assert tok.decode(enc.input_ids[0].tolist()) == "the white automobile left of the car"
    assert enc.tokens[1][0] == "z" and UNK_TOKEN not in enc.tokens[1]  # every letter is in the alphabet
    # A letter outside the alphabet: WordPiece gives up on the word, BPE only on the letter.
    expected = [UNK_TOKEN] if kind == "wordpiece" else ["d", "##o", "##n", "##n", UNK_TOKEN, "##e", "##s"]
    assert enc.tokens[2] == expected


def test_vocab_size_caps_every_kind_and_bad_settings_are_refused() -> None:
    texts = [ex.text for ex in load_task("car-order", n_pairs=400).train]
    for kind in KINDS:
        full = build_tokenizer(texts, kind=kind).get_vocab_size()
        assert full > 100
        assert build_tokenizer(texts, kind=kind, vocab_size=100).get_vocab_size() == 100
    with pytest.raises(ValueError, match="unknown tokenizer kind 'sentencepiece'"):
        build_tokenizer(texts, kind="sentencepiece")
    with pytest.raises(ValueError, match="vocab_size must exceed the 3 special tokens of a wordlevel"):
        build_tokenizer(texts, vocab_size=3, add_cls=True)
    with pytest.raises(ValueError, match="exceed the 74 special tokens and letter and digit pieces of a bpe"):
        build_tokenizer(texts, kind="bpe", vocab_size=74)


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_subword_file_loads_with_plain_tokenizers(tmp_path: Path, kind: str) -> None:
    tok = build_tokenizer(TEXTS, kind=kind, add_cls=True)
    batch = ["The WHITE carriage, on the left?", "hello worldwide"]
    before = encode_batch(tok, batch, max_len=16)
    plain = Tokenizer.from_file(str(save_tokenizer(tok, tmp_path / "tokenizer.json")))
    assert [e.tokens for e in plain.encode_batch(batch)] == before.tokens
    assert before.tokens[1][:3] == [CLS_TOKEN, "hello", "world"]
