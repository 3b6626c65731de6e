"""Tokenizer built from the training texts and saved as ``tokenizer.json``.

Three kinds share one normaliser and pre-tokenizer: ``wordlevel`` (one id per training word,
every other word is ``[UNK]``), and the subword kinds ``wordpiece`` and ``bpe``, which split a
word they never saw into pieces they did see ("leftmost" -> "left", "##most"). The artifact is
a plain Hugging Face ``tokenizers`` JSON file: the service loads it with
``tokenizers.Tokenizer.from_file`` alone, so everything that shapes the ids (normaliser,
pre-tokenizer, vocabulary, the optional ``[CLS]`` post-processor) lives inside the file and
nothing in this module is needed to reproduce them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE, WordLevel, WordPiece
from tokenizers.processors import TemplateProcessing
from tokenizers.trainers import BpeTrainer, Trainer, WordLevelTrainer, WordPieceTrainer

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
CLS_TOKEN = "[CLS]"
PAD_ID = 0
UNK_ID = 1
CLS_ID = 2  # only present when the tokenizer was built with add_cls=True
KINDS = ("wordlevel", "wordpiece", "bpe")
SUBWORD_PREFIX = "##"  # marks a piece that continues a word, for both subword kinds
# Subword vocabularies hold every lowercase letter and digit both as a word's first piece and
# as a continuing one, so a word made of them always splits into pieces instead of [UNK].
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
SUBWORD_MAX_VOCAB = 200_000


@dataclass(frozen=True)
class Encoded:
    """A batch padded to its own longest sequence (never to max_len)."""

    input_ids: npt.NDArray[np.int64]  # [B, T]
    attention_mask: npt.NDArray[np.int64]  # [B, T]
    lengths: npt.NDArray[np.int64]  # [B] real tokens per row, [CLS] included
    truncated: list[bool]  # [B] True where tokens beyond max_len were dropped
    tokens: list[list[str]]  # [B][lengths[b]] token strings without padding


def _normalizer() -> normalizers.Normalizer:
    # Apostrophes are dropped (don't -> dont) so contractions stay one word; any other
    # punctuation becomes a space so "left,right" or "white-car" still split into words.
    return normalizers.Sequence(
        [
            normalizers.NFKC(),
            normalizers.Lowercase(),
            normalizers.Replace(Regex(r"['’`]"), ""),
            normalizers.Replace(Regex(r"[^\w\s]"), " "),
        ]
    )


def _model_and_trainer(
    kind: str, specials: list[str], min_frequency: int, vocab_size: int
) -> tuple[Tokenizer, Trainer]:
    # The trainers' own default silently keeps 30,000; the subword trainers allocate room for
    # vocab_size entries up front, so their "no cap" is SUBWORD_MAX_VOCAB.
    no_cap = 2**31 - 1 if kind == "wordlevel" else SUBWORD_MAX_VOCAB
    common = {
        "vocab_size": vocab_size or no_cap,
        "min_frequency": min_frequency,
        "special_tokens": specials,
        "show_progress": False,
    }
    if kind == "wordlevel":
        return Tokenizer(WordLevel(unk_token=UNK_TOKEN)), WordLevelTrainer(**common)
    subword = {"initial_alphabet": list(ALPHABET), "continuing_subword_prefix": SUBWORD_PREFIX, **common}
    if kind == "wordpiece":
        tok = Tokenizer(WordPiece(unk_token=UNK_TOKEN, continuing_subword_prefix=SUBWORD_PREFIX))
        trainer: Trainer = WordPieceTrainer(**subword)
    elif kind == "bpe":
        tok = Tokenizer(BPE(unk_token=UNK_TOKEN, continuing_subword_prefix=SUBWORD_PREFIX))
        trainer = BpeTrainer(**subword)
    else:
        raise ValueError(f"unknown tokenizer kind {kind!r}; choose one of {', '.join(KINDS)}")
    tok.decoder = decoders.WordPiece(prefix=SUBWORD_PREFIX)  # joins "left", "##most" back into a word
    return tok, trainer


def _train(
    kind: str, texts: list[str], specials: list[str], min_frequency: int, size: int
) -> Tokenizer:
    tok, trainer = _model_and_trainer(kind, specials, min_frequency, size)
    tok.normalizer = _normalizer()
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator(texts, trainer=trainer)
    if kind != "wordlevel":
        tok = _with_continuing_alphabet(tok)
    return tok


def build_tokenizer(
    texts: Iterable[str],
    *,
    kind: str = "wordlevel",
    min_frequency: int = 1,
    vocab_size: int = 0,
    add_cls: bool = False,
) -> Tokenizer:
    """Train a vocabulary of ``kind`` (one of ``KINDS``) on ``texts``.

    Ids 0 and 1 are ``[PAD]`` and ``[UNK]``; with ``add_cls`` id 2 is ``[CLS]``, which a
    post-processor puts in front of every encoded text. ``vocab_size`` caps the vocabulary,
    special tokens included (0: no cap, so every training word is one token; the subword kinds
    stop at ``SUBWORD_MAX_VOCAB``).
    For ``wordlevel`` words seen fewer than ``min_frequency`` times map to ``[UNK]``; for the
    subword kinds it is the least count of a pair of pieces that is merged.
    """
    if min_frequency < 1:
        raise ValueError(f"min_frequency must be >= 1, got {min_frequency}")
    if kind not in KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r}; choose one of {', '.join(KINDS)}")
    specials = [PAD_TOKEN, UNK_TOKEN] + ([CLS_TOKEN] if add_cls else [])
    least = len(specials) + (0 if kind == "wordlevel" else 2 * len(ALPHABET))
    if vocab_size and vocab_size <= least:
        what = "special tokens" if kind == "wordlevel" else "special tokens and letter and digit pieces"
        raise ValueError(
            f"vocab_size must exceed the {least} {what} of a {kind} vocabulary, got {vocab_size}"
        )
    corpus = list(texts)
    if not corpus:
        raise ValueError("cannot build a tokenizer from zero texts")
    tok = _train(kind, corpus, specials, min_frequency, vocab_size)
    if vocab_size and tok.get_vocab_size() > vocab_size:
        # The added alphabet pieces pushed it over: learn that many fewer merges.
        tok = _train(kind, corpus, specials, min_frequency, 2 * vocab_size - tok.get_vocab_size())
    if tok.get_vocab_size() <= least:
        raise ValueError(
            f"no word occurs at least min_frequency={min_frequency} times in the {len(corpus)} training texts"
        )
    if add_cls:
        tok.post_processor = TemplateProcessing(
            single=f"{CLS_TOKEN} $A", special_tokens=[(CLS_TOKEN, CLS_ID)]
        )
    _check_special_ids(tok, "the newly built tokenizer")
    return tok


def _with_continuing_alphabet(tok: Tokenizer) -> Tokenizer:
    # The trainers' initial alphabet only adds first pieces ("q"), and a continuing "##q" exists
    # only if training saw a q inside a word; one missing piece turns a whole word into [UNK].
    document = json.loads(tok.to_str())
    vocab: dict[str, int] = document["model"]["vocab"]
    for piece in [*ALPHABET, *(SUBWORD_PREFIX + c for c in ALPHABET)]:
        vocab.setdefault(piece, len(vocab))
    return Tokenizer.from_str(json.dumps(document))


def _check_special_ids(tok: Tokenizer, where: str) -> None:
    for token, expected in ((PAD_TOKEN, PAD_ID), (UNK_TOKEN, UNK_ID)):
        actual = tok.token_to_id(token)
        if actual != expected:
            raise ValueError(f"{where}: {token} must have id {expected}, found {actual}")


def save_tokenizer(tok: Tokenizer, path: str | Path) -> Path:
    """Write ``tok`` as ``tokenizer.json`` without any padding or truncation settings.

    Those settings are per-call choices (``encode_batch`` sets them); leaving them out keeps
    the artifact identical however the tokenizer was used before it was saved.
    """
    path = Path(path)
    document = json.loads(tok.to_str())
    document["padding"] = None
    document["truncation"] = None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    tmp.replace(path)
    return path


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load a saved tokenizer; a missing or malformed file is an error, never a default."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file not found: {path}")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for malformed JSON
        raise ValueError(f"{path} is not a valid tokenizers JSON file: {exc}") from exc
    _check_special_ids(tok, str(path))
    return tok


def has_cls(tok: Tokenizer) -> bool:
    """Whether encodings of ``tok`` start with ``[CLS]``."""
    return tok.num_special_tokens_to_add(is_pair=False) > 0 and tok.token_to_id(CLS_TOKEN) is not None


def _configure(tok: Tokenizer, max_len: int) -> None:
    # Re-enabling resets Rust-side state, so only touch the settings when they differ.
    truncation = tok.truncation
    if truncation is None or truncation["max_length"] != max_len or truncation["direction"] != "right":
        tok.enable_truncation(max_length=max_len, direction="right")
    padding = tok.padding
    if (
        padding is None
        or padding["length"] is not None
        or padding["pad_id"] != PAD_ID
        or padding["direction"] != "right"
        or padding["pad_to_multiple_of"] is not None
    ):
        tok.enable_padding(pad_id=PAD_ID, pad_token=PAD_TOKEN, direction="right")


def encode_batch(tok: Tokenizer, texts: Sequence[str], max_len: int) -> Encoded:
    """Encode ``texts`` in one Rust call, truncating at ``max_len`` tokens ([CLS] included).

    Rows are right-padded with ``PAD_ID`` to the longest row of this batch. Sets the
    tokenizer's truncation and padding to these values as a side effect.
    """
    if isinstance(texts, str):
        raise TypeError("encode_batch expects a sequence of texts, not a single string")
    specials = tok.num_special_tokens_to_add(is_pair=False)
    if max_len <= specials:
        raise ValueError(f"max_len must exceed the {specials} special token(s) added per text, got {max_len}")
    if len(texts) == 0:
        empty = np.zeros((0, 0), dtype=np.int64)
        return Encoded(empty, empty.copy(), np.zeros((0,), dtype=np.int64), [], [])
    _configure(tok, max_len)
    encodings = tok.encode_batch(list(texts), add_special_tokens=True)
    input_ids = np.array([e.ids for e in encodings], dtype=np.int64)  # [B, T]
    attention_mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)  # [B, T]
    lengths = attention_mask.sum(axis=1, dtype=np.int64)  # [B]
    truncated = [len(e.overflowing) > 0 for e in encodings]
    tokens = [e.tokens[:n] for e, n in zip(encodings, lengths.tolist(), strict=True)]
    return Encoded(input_ids, attention_mask, lengths, truncated, tokens)
