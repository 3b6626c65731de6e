"""Tiny Hugging Face sequence classifiers as ``save_pretrained`` writes them, built in the test.

One per architecture attnserve-export imports: random weights (32 wide, 2 layers, 2 or 4
heads, 40 positions) and a tokenizer made with the ``tokenizers`` library from a small
vocabulary of the architecture's kind (WordPiece for the BERTs and MPNet, byte-level BPE for
RoBERTa, Unigram for XLM-R and ALBERT), each with its own special tokens and template,
wrapped as the matching transformers tokenizer class. No hub, well under a second each.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

WORDS = ("the", "film", "was", "good", "bad", "plot", "great", "and", "it", "this", "wonderful",
         "service", "slow", "food", "cold", "music", "dull", "cast")  # fmt: skip
CHARACTERS = tuple("abcdefghijklmnopqrstuvwxyz0123456789.,!?;:'")
POSITIONS = 40
SIZES = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "intermediate_size": 64,
    "max_position_embeddings": POSITIONS,
}


@dataclass(frozen=True)
class Architecture:
    name: str  # the model_type
    labels: tuple[str, ...]  # id2label, in id order (not sorted: the order must travel)
    tokenizer: Callable[[], Tokenizer]
    tokenizer_class: Any  # the transformers class it is wrapped as
    config: Callable[[int, int, dict[int, str]], Any]  # (vocab size, pad id, id2label) -> config


def _wordpiece(specials: list[str], unk: str, cls: str, sep: str) -> Tokenizer:
    pieces = [*specials, *WORDS, *CHARACTERS, *(f"##{c}" for c in CHARACTERS)]
    tok = Tokenizer(
        models.WordPiece(vocab={p: i for i, p in enumerate(dict.fromkeys(pieces))}, unk_token=unk)
    )
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    ids = {cls: specials.index(cls), sep: specials.index(sep)}
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1", special_tokens=list(ids.items())
    )
    return tok


def bert_wordpiece() -> Tokenizer:
    return _wordpiece(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "[UNK]", "[CLS]", "[SEP]")


def mpnet_wordpiece() -> Tokenizer:
    return _wordpiece(["<s>", "<pad>", "</s>", "[UNK]", "<mask>"], "[UNK]", "<s>", "</s>")


def roberta_bpe() -> tuple[Tokenizer, dict[str, int], list[tuple[str, str]]]:
    """Byte-level BPE: every byte, plus merges that build each word after a space ("Ġfilm")."""
    vocab = {
        t: i
        for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>", *sorted(pre_tokenizers.ByteLevel.alphabet())])
    }
    merges: list[tuple[str, str]] = []
    for word in WORDS:
        built = "Ġ"
        for char in word:
            merges.append((built, char))
            built += char
            vocab.setdefault(built, len(vocab))
    merges = list(dict.fromkeys(merges))
    vocab["<mask>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=False)
    return tok, vocab, merges


def _unigram(specials: list[str], unk: str, cls: str, sep: str, lowercase: bool) -> Tokenizer:
    letters = CHARACTERS if lowercase else (*CHARACTERS, *"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    pieces = [(s, 0.0) for s in specials] + [(f"▁{w}", -2.0) for w in WORDS] + [("▁", -3.0)]
    tok = Tokenizer(models.Unigram([*pieces, *((c, -5.0) for c in letters)], unk_id=specials.index(unk)))
    tok.normalizer = normalizers.Sequence(
        [normalizers.NFKC(), *([normalizers.Lowercase()] if lowercase else [])]
    )
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    ids = {cls: specials.index(cls), sep: specials.index(sep)}
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} {sep} $B {sep}", special_tokens=list(ids.items())
    )
    return tok


def xlmr_unigram() -> Tokenizer:
    return _unigram(["<s>", "<pad>", "</s>", "<unk>", "<mask>"], "<unk>", "<s>", "</s>", lowercase=False)


def albert_unigram() -> Tokenizer:
    return _unigram(["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"], "<unk>", "[CLS]", "[SEP]", lowercase=True)


def _sized(cls: Any, **fixed: Any) -> Callable[[int, int, dict[int, str]], Any]:
    def make(vocab_size: int, pad_id: int, id2label: dict[int, str]) -> Any:
        return cls(vocab_size=vocab_size, pad_token_id=pad_id, id2label=id2label, **fixed)

    return make


T = transformers
ARCHITECTURES = {
    a.name: a
    for a in (
        Architecture("bert", ("negative", "positive"), bert_wordpiece, T.BertTokenizerFast,
                     _sized(T.BertConfig, num_attention_heads=2, **SIZES)),
        Architecture("distilbert", ("sports", "arts", "news"), bert_wordpiece, T.DistilBertTokenizerFast,
                     _sized(T.DistilBertConfig, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                            max_position_embeddings=POSITIONS)),
        Architecture("roberta", ("positive", "negative"), lambda: roberta_bpe()[0], T.RobertaTokenizerFast,
                     _sized(T.RobertaConfig, num_attention_heads=4, **SIZES)),
        Architecture("xlm-roberta", ("yes", "no", "maybe"), xlmr_unigram, T.XLMRobertaTokenizerFast,
                     _sized(T.XLMRobertaConfig, num_attention_heads=2, **SIZES)),
        Architecture("electra", ("ham", "spam"), bert_wordpiece, T.ElectraTokenizerFast,
                     _sized(T.ElectraConfig, embedding_size=16, num_attention_heads=2, **SIZES)),
        Architecture("albert", ("b", "a"), albert_unigram, T.AlbertTokenizerFast,
                     _sized(T.AlbertConfig, embedding_size=16, num_attention_heads=4, **SIZES)),
        Architecture("mpnet", ("low", "mid", "high"), mpnet_wordpiece, T.MPNetTokenizerFast,
                     _sized(T.MPNetConfig, num_attention_heads=2, **SIZES)),
    )
}  # fmt: skip


def save_classifier(arch: Architecture, folder: Path, seed: int = 0) -> Path:
    """Write ``arch``'s tiny classifier and tokenizer to ``folder`` with save_pretrained."""
    tokenizer = arch.tokenizer_class(tokenizer_object=arch.tokenizer(), model_max_length=512)
    config = arch.config(tokenizer.backend_tokenizer.get_vocab_size(), tokenizer.pad_token_id,
                         dict(enumerate(arch.labels)))  # fmt: skip
    torch.manual_seed(seed)
    model = transformers.AutoModelForSequenceClassification.from_config(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def keep_slow_files(folder: Path, model_type: str) -> None:
    """Replace tokenizer.json by the slow files a converter reads (vocab.txt; vocab.json and merges.txt)."""
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    (folder / "tokenizer.json").unlink()
    if model_type == "roberta":
        _, vocab, merges = roberta_bpe()
        (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
        (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
        return
    pieces = sorted(tok.get_vocab().items(), key=lambda item: item[1])
    (folder / "vocab.txt").write_text("".join(f"{piece}\n" for piece, _ in pieces), encoding="utf-8")


def texts(count: int, seed: int) -> list[str]:
    """Short reviews of the vocabulary's words, mixed case, punctuation, now and then a word it lacks."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        words = [rng.choice(WORDS) for _ in range(rng.randint(2, 12))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), rng.choice(("zebra", "Quixotic", "42")))
        text = " ".join(words).capitalize() + rng.choice((".", "!", "?", ""))
        out.append(text.upper() if rng.random() < 0.1 else text)
    return out
