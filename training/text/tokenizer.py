"""Tokenizer built from the training texts and saved as ``tokenizer.json``.

``vocabulary`` decides the model (word-level or subword) and learns it; this module adds the
shared normaliser, pre-tokenizer and ``[CLS]`` post-processor, and encodes. The artifact
is a plain Hugging Face ``tokenizers`` JSON file: the service loads it with
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
from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers
from tokenizers.processors import TemplateProcessing

from attnserve.training.text import vocabulary

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
CLS_TOKEN = "[CLS]"
PAD_ID = 0
UNK_ID = 1
CLS_ID = 2  # only present when the tokenizer was built with add_cls=True

# Which tokens a text longer than max_len keeps: its head, its tail, or both ends. head+tail
# keeps the first quarter and the last three quarters of max_len, the split that did best
# for long reviews in Sun et al. (2019), "How to Fine-Tune BERT for Text Classification?".
TRUNCATION_SIDES = ("head", "tail", "head+tail")
HEAD_SHARE = 0.25
_DIRECTION = {"head": "right", "tail": "left"}  # tokenizers' names: the side that is cut


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


def _prepare(tok: Tokenizer) -> None:
    tok.normalizer = _normalizer()
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()


def build_tokenizer(
    texts: Iterable[str],
    *,
    kind: str = "wordlevel",
    min_frequency: int = 1,
    add_cls: bool = False,
    vocab_size: int = 0,
) -> Tokenizer:
    """Train a vocabulary of ``kind`` (one of ``vocabulary.KINDS``) on ``texts``.

    Ids 0 and 1 are ``[PAD]`` and ``[UNK]``; with ``add_cls`` id 2 is ``[CLS]``, which a
    post-processor puts in front of every encoded text. ``vocab_size`` caps the vocabulary,
    special tokens included (0: no cap). For ``wordlevel`` words seen fewer than
    ``min_frequency`` times, and all but the ``vocab_size`` most frequent, map to ``[UNK]``;
    for the subword kinds ``min_frequency`` is the least count of a pair of pieces that is
    merged, and an unseen word splits into pieces.
    """
    if min_frequency < 1:
        raise ValueError(f"min_frequency must be >= 1, got {min_frequency}")
    if kind not in vocabulary.KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r}; choose one of {', '.join(vocabulary.KINDS)}")
    specials = [PAD_TOKEN, UNK_TOKEN] + ([CLS_TOKEN] if add_cls else [])
    least = vocabulary.least_size(kind, len(specials))
    if vocab_size and vocab_size <= least:
        what = "special tokens" if kind == "wordlevel" else "special tokens and letter and digit pieces"
        raise ValueError(
            f"vocab_size must exceed the {least} {what} of a {kind} vocabulary, got {vocab_size}"
        )
    corpus = list(texts)
    if not corpus:
        raise ValueError("cannot build a tokenizer from zero texts")
    tok = vocabulary.learn(
        kind,
        corpus,
        unk_token=UNK_TOKEN,
        specials=specials,
        min_frequency=min_frequency,
        vocab_size=vocab_size,
        prepare=_prepare,
    )
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


def _check_special_ids(tok: Tokenizer, where: str) -> None:
    for token, expected in ((PAD_TOKEN, PAD_ID), (UNK_TOKEN, UNK_ID)):
        actual = tok.token_to_id(token)
        if actual != expected:
            raise ValueError(f"{where}: {token} must have id {expected}, found {actual}")


def save_tokenizer(tok: Tokenizer, path: str | Path, *, max_len: int = 0, truncation: str = "head") -> Path:
    """Write ``tok`` as ``tokenizer.json`` without padding, and with truncation only for "tail".

    Padding and the usual head truncation are per-call choices (``encode_batch`` sets them);
    leaving them out keeps the artifact identical however the tokenizer was used before.
    A model trained on the tails of long texts must be served their tails too, so "tail"
    is written into the file (``max_len`` tokens, cut on the left) for every reader to honour.
    """
    path = Path(path)
    document = json.loads(tok.to_str())
    document["padding"] = None
    document["truncation"] = None
    if truncation == "tail":
        if max_len < 1:
            raise ValueError("saving tail truncation needs the model's max_len")
        document["truncation"] = {"direction": "Left", "max_length": max_len, "strategy": "LongestFirst",
                                  "stride": 0}
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


def saved_truncation(tok: Tokenizer) -> str:
    """The side a loaded tokenizer keeps of long texts: "tail" if its file says so, else "head"."""
    truncation = tok.truncation
    return "tail" if truncation is not None and truncation["direction"] == "left" else "head"


def _configure(tok: Tokenizer, max_len: int | None, direction: str = "right") -> None:
    # Re-enabling resets Rust-side state, so only touch the settings when they differ.
    truncation = tok.truncation
    if max_len is None:
        if truncation is not None:
            tok.no_truncation()
    elif truncation is None or truncation["max_length"] != max_len or truncation["direction"] != direction:
        tok.enable_truncation(max_length=max_len, direction=direction)
    padding = tok.padding
    if (
        padding is None
        or padding["length"] is not None
        or padding["pad_id"] != PAD_ID
        or padding["direction"] != "right"
        or padding["pad_to_multiple_of"] is not None
    ):
        tok.enable_padding(pad_id=PAD_ID, pad_token=PAD_TOKEN, direction="right")


def encode_batch(
    tok: Tokenizer, texts: Sequence[str], max_len: int, truncation: str | None = None
) -> Encoded:
    """Encode ``texts`` in one Rust call, truncating at ``max_len`` tokens ([CLS] included).

    ``truncation`` is the side of a long text to keep (``TRUNCATION_SIDES``); None keeps the
    side saved in the tokenizer file. Rows are right-padded with ``PAD_ID`` to the longest
    row of this batch. Sets the tokenizer's truncation and padding as a side effect.
    """
    side = saved_truncation(tok) if truncation is None else truncation
    if side not in TRUNCATION_SIDES:
        raise ValueError(f"truncation must be one of {TRUNCATION_SIDES}, got {side!r}")
    if isinstance(texts, str):
        raise TypeError("encode_batch expects a sequence of texts, not a single string")
    specials = tok.num_special_tokens_to_add(is_pair=False)
    if max_len <= specials:
        raise ValueError(f"max_len must exceed the {specials} special token(s) added per text, got {max_len}")
    if len(texts) == 0:
        empty = np.zeros((0, 0), dtype=np.int64)
        return Encoded(empty, empty.copy(), np.zeros((0,), dtype=np.int64), [], [])
    if side == "head+tail":
        return _encode_both_ends(tok, texts, max_len, specials)
    _configure(tok, max_len, _DIRECTION[side])
    encodings = tok.encode_batch(list(texts), add_special_tokens=True)
    input_ids = np.array([e.ids for e in encodings], dtype=np.int64)  # [B, T]
    attention_mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)  # [B, T]
    lengths = attention_mask.sum(axis=1, dtype=np.int64)  # [B]
    truncated = [len(e.overflowing) > 0 for e in encodings]
    tokens = [e.tokens[:n] for e, n in zip(encodings, lengths.tolist(), strict=True)]
    return Encoded(input_ids, attention_mask, lengths, truncated, tokens)


def _encode_both_ends(tok: Tokenizer, texts: Sequence[str], max_len: int, specials: int) -> Encoded:
    """head+tail: the whole text is encoded, then its middle is dropped (tokenizers cannot)."""
    _configure(tok, None)
    tok.no_padding()
    encodings = tok.encode_batch(list(texts), add_special_tokens=True)
    head = specials + max(1, int(HEAD_SHARE * (max_len - specials)))  # [CLS] stays at the front
    rows: list[list[int]] = []
    tokens: list[list[str]] = []
    for e in encodings:
        ids, strings = e.ids, e.tokens
        if len(ids) > max_len:
            tail = len(ids) - (max_len - head)
            ids, strings = ids[:head] + ids[tail:], strings[:head] + strings[tail:]
        rows.append(ids)
        tokens.append(strings)
    width = max(len(r) for r in rows)
    input_ids = np.full((len(rows), width), PAD_ID, dtype=np.int64)  # [B, T]
    attention_mask = np.zeros((len(rows), width), dtype=np.int64)  # [B, T]
    for i, ids in enumerate(rows):
        input_ids[i, : len(ids)] = ids
        attention_mask[i, : len(ids)] = 1
    lengths = attention_mask.sum(axis=1, dtype=np.int64)  # [B]
    truncated = [len(e.ids) > max_len for e in encodings]
    return Encoded(input_ids, attention_mask, lengths, truncated, tokens)


def token_lengths(tok: Tokenizer, texts: Sequence[str], chunk: int = 512) -> npt.NDArray[np.int64]:
    """Untruncated token count of each text ([CLS] included), encoded a chunk at a time."""
    _configure(tok, None)
    tok.no_padding()
    out = np.empty(len(texts), dtype=np.int64)
    for start in range(0, len(texts), chunk):
        encodings = tok.encode_batch_fast(list(texts[start : start + chunk]), add_special_tokens=True)
        out[start : start + len(encodings)] = [len(e.ids) for e in encodings]
    return out
