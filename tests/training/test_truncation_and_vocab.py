"""Which tokens a long text keeps, max_len auto, the vocabulary cap and what each reports."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnserve.training.report.data import (
    DataReport,
    auto_max_len,
    check_classes,
    check_lengths,
    check_vocabulary,
)
from attnserve.training.text.tokenizer import (
    UNK_ID,
    build_tokenizer,
    encode_batch,
    load_tokenizer,
    save_tokenizer,
    token_lengths,
)

TEXT = " ".join(f"w{i}" for i in range(20))  # w0 .. w19


@pytest.mark.parametrize("add_cls", [False, True])
def test_head_tail_and_both_ends(add_cls: bool) -> None:
    tok = build_tokenizer([TEXT, "short one"], add_cls=add_cls)
    first = ["[CLS]"] if add_cls else []
    head = encode_batch(tok, [TEXT, "short one"], 8, "head")
    assert head.tokens[0] == first + [f"w{i}" for i in range(8 - len(first))]
    assert head.truncated == [True, False] and head.tokens[1] == [*first, "short", "one"]
    tail = encode_batch(tok, [TEXT], 8, "tail")
    assert tail.tokens[0] == first + [f"w{i}" for i in range(20 - 8 + len(first), 20)]
    both = encode_batch(tok, [TEXT, "short one"], 12, "head+tail")
    assert len(both.tokens[0]) == 12 and both.truncated == [True, False]
    # A quarter of the room (3 of 12 positions, [CLS] among them) for the head, the rest for the
    # tail, nothing from the middle.
    head_words = ["w0", "w1"] if add_cls else ["w0", "w1", "w2"]
    assert both.tokens[0] == first + head_words + [f"w{i}" for i in range(11, 20)]
    assert both.input_ids.shape == (2, 12) and both.attention_mask[1].sum() == 2 + len(first)
    assert int(both.lengths[0]) == 12
    assert token_lengths(tok, [TEXT, "short one"]).tolist() == [20 + len(first), 2 + len(first)]


def test_tail_truncation_travels_in_the_tokenizer_file(tmp_path: Path) -> None:
    tok = build_tokenizer([TEXT])
    save_tokenizer(tok, tmp_path / "tail.json", max_len=6, truncation="tail")
    save_tokenizer(tok, tmp_path / "head.json", max_len=6, truncation="head")
    assert json.loads((tmp_path / "tail.json").read_text())["truncation"]["direction"] == "Left"
    assert json.loads((tmp_path / "head.json").read_text())["truncation"] is None
    # Readers that do not name a side (export's evaluation, the service) keep the saved one.
    reread = load_tokenizer(tmp_path / "tail.json")
    assert encode_batch(reread, [TEXT], 6).tokens[0] == [f"w{i}" for i in range(14, 20)]
    assert encode_batch(load_tokenizer(tmp_path / "head.json"), [TEXT], 6).tokens[0][0] == "w0"


def test_vocab_size_caps_the_vocabulary_and_the_report_counts_what_became_unk() -> None:
    texts = ["common " * 5 + f"rare{i}" for i in range(30)] + ["also common"] * 3
    capped = build_tokenizer(texts, vocab_size=10)
    assert capped.get_vocab_size() == 10
    full = build_tokenizer(texts)
    assert full.get_vocab_size() == 2 + 2 + 30  # [PAD] [UNK], common also, rare0..29
    enc = encode_batch(capped, texts, 16)
    report = DataReport()
    check_vocabulary(report, capped, texts, {"train": (enc.input_ids, enc.lengths)}, 10)
    vocab = report.figures["vocabulary"]
    # 10 entries = 2 specials + 8 words: 24 of the 32 word types become [UNK]
    assert vocab["word_types_in_train"] == 32 and vocab["size"] == 10 and vocab["word_types_unk"] == 24
    unk_share = float((enc.input_ids == UNK_ID).sum()) / float(enc.attention_mask.sum())
    assert vocab["unk_token_share"]["train"] == pytest.approx(unk_share, abs=1e-4) and unk_share > 0.1
    assert any("24 word types" in w and "--vocab-size 10" in w for w in report.warnings)
    with pytest.raises(ValueError, match="special tokens"):
        build_tokenizer(texts, vocab_size=2)


def test_lengths_report_and_max_len_auto() -> None:
    lengths = {"train": np.arange(1, 101), "val": np.array([10, 200])}
    assert auto_max_len(lengths["train"], 95, 512) == 96
    assert auto_max_len(lengths["train"], 95, 50) == 50
    assert auto_max_len(np.array([2, 3]), 95, 512) == 8  # never below 8
    with pytest.raises(ValueError):
        auto_max_len(lengths["train"], 0, 512)
    report = DataReport()
    check_lengths(report, lengths, 64, "head", "set")
    train = report.figures["lengths"]["train"]
    assert (train["truncated"], train["truncated_share"], train["max"], train["p50"]) == (36, 0.36, 100, 50)
    assert report.figures["lengths"]["val"]["truncated_share"] == 0.5
    assert "max_len 64 (set) cuts 36.0% of train, 50.0% of val" in report.notes[0]
    assert any("truncates 36% of the training texts" in w and "--max-len auto" in w for w in report.warnings)
    # Training fits; the one long validation text is cut, and the warning names its split.
    judged = DataReport()
    check_lengths(judged, lengths, 100, "tail", "set")
    assert judged.figures["truncation"] == "tail"
    assert judged.warnings == [
        "max_len 100 cuts 1 val texts (50.0% of val, longest 200 tokens): the val figures score texts "
        "the model only partly read; raise --max-len to 200 or use --max-len auto"
    ]
    quiet = DataReport()
    check_lengths(quiet, lengths, 200, "tail", "set")
    assert quiet.warnings == []


def test_rare_and_missing_classes_are_reported() -> None:
    report = DataReport()
    check_classes(report, ("neg", "pos", "other"), [0] * 95 + [1] * 5, weighted=False)
    assert report.figures["train_classes"] == {"neg": 95, "pos": 5, "other": 0}
    assert any("'pos', 'other'" in w and "--class-weights balanced" in w for w in report.warnings)
    assert any("'other' occur only outside the training data" in w for w in report.warnings)
    weighted = DataReport()
    check_classes(weighted, ("neg", "pos"), [0] * 95 + [1] * 5, weighted=True)
    assert weighted.warnings == []
