"""Which tokenizer model a vocabulary uses, and how it is learned from the training texts.

``wordlevel`` keeps one id per training word; every other word is ``[UNK]``. The subword
kinds, ``wordpiece`` and ``bpe``, split a word they never saw into pieces they did see
("leftmost" -> "left", "##most"), so unseen words keep some of their identity. All three
are plain ``tokenizers`` models: the saved ``tokenizer.json`` needs no code of ours.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tokenizers import Tokenizer, decoders
from tokenizers.models import BPE, WordLevel, WordPiece
from tokenizers.trainers import BpeTrainer, Trainer, WordLevelTrainer, WordPieceTrainer

KINDS = ("wordlevel", "wordpiece", "bpe")
SUBWORD_PREFIX = "##"  # marks a piece that continues a word, for both subword kinds
# Subword vocabularies hold every lowercase letter and digit both as a word's first piece and
# as a continuing one, so a word made of them always splits into pieces instead of [UNK].
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
# The subword trainers allocate room for vocab_size entries up front, so "no cap" is this.
SUBWORD_MAX_VOCAB = 200_000


def least_size(kind: str, n_specials: int) -> int:
    """The entries every vocabulary of ``kind`` holds before it learns a word."""
    return n_specials + (0 if kind == "wordlevel" else 2 * len(ALPHABET))


def _model_and_trainer(
    kind: str, unk_token: str, specials: list[str], min_frequency: int, vocab_size: int
) -> tuple[Tokenizer, Trainer]:
    if kind == "wordlevel":
        # The trainers' own default silently keeps 30,000 entries.
        trainer: Trainer = WordLevelTrainer(
            vocab_size=vocab_size or 2**31 - 1,
            min_frequency=min_frequency,
            special_tokens=specials,
            show_progress=False,
        )
        return Tokenizer(WordLevel(unk_token=unk_token)), trainer
    if kind not in KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r}; choose one of {', '.join(KINDS)}")
    model, trainer_cls = (WordPiece, WordPieceTrainer) if kind == "wordpiece" else (BPE, BpeTrainer)
    tok = Tokenizer(model(unk_token=unk_token, continuing_subword_prefix=SUBWORD_PREFIX))
    trainer = trainer_cls(
        vocab_size=vocab_size or SUBWORD_MAX_VOCAB,  # these trainers allocate this much up front
        min_frequency=min_frequency,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=list(ALPHABET),
        continuing_subword_prefix=SUBWORD_PREFIX,
    )
    tok.decoder = decoders.WordPiece(prefix=SUBWORD_PREFIX)  # joins "left", "##most" back into a word
    return tok, trainer


def _with_continuing_alphabet(tok: Tokenizer) -> Tokenizer:
    # The trainers' initial alphabet only adds first pieces ("q"), and a continuing "##q" exists
    # only if training saw a q inside a word; one missing piece turns a whole word into [UNK].
    document = json.loads(tok.to_str())
    vocab: dict[str, int] = document["model"]["vocab"]
    for piece in [*ALPHABET, *(SUBWORD_PREFIX + c for c in ALPHABET)]:
        vocab.setdefault(piece, len(vocab))
    return Tokenizer.from_str(json.dumps(document))


def learn(
    kind: str,
    texts: list[str],
    *,
    unk_token: str,
    specials: list[str],
    min_frequency: int,
    vocab_size: int,
    prepare: Callable[[Tokenizer], None],
) -> Tokenizer:
    """A tokenizer of ``kind`` trained on ``texts``, at most ``vocab_size`` entries (0: no cap).

    ``prepare`` sets the normaliser and pre-tokenizer before training.
    """

    def train(size: int) -> Tokenizer:
        tok, trainer = _model_and_trainer(kind, unk_token, specials, min_frequency, size)
        prepare(tok)
        tok.train_from_iterator(texts, trainer=trainer)
        return tok if kind == "wordlevel" else _with_continuing_alphabet(tok)

    tok = train(vocab_size)
    if vocab_size and tok.get_vocab_size() > vocab_size:
        # The added alphabet pieces pushed it over: learn that many fewer merges.
        tok = train(2 * vocab_size - tok.get_vocab_size())
    return tok
