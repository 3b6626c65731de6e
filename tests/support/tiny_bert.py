"""A tiny BERT checkpoint in Hugging Face format, built in the test: no hub, about a second.

``make_tiny_bert(root)`` writes ``root/tiny-bert`` as ``save_pretrained`` does (config.json,
model.safetensors) plus a WordPiece ``tokenizer.json`` learnt on this module's sentences,
with BERT's normalizer and pre-tokenizer and the ``[CLS] $A [SEP]`` template: the layout of
a real BERT-family checkpoint, small enough for fast tests (2 layers, 32 wide, 2 heads).
``train_tiny_encoder_run(root)`` fine-tunes it on a small CSV through the real training
entry point and returns the run directory.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers.processors import TemplateProcessing
from transformers import BertConfig, BertModel

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0..4, as in BERT's own vocabulary
GOOD = ("good", "great", "lovely", "superb", "wonderful")
BAD = ("bad", "dull", "awful", "boring", "terrible")
NOUNS = ("film", "plot", "cast", "script", "ending", "music")


def sentence(rng: random.Random) -> tuple[str, str]:
    """A short review and its label: positive unless the adjective is a bad one."""
    positive = rng.random() < 0.5
    text = f"The {rng.choice(NOUNS)} was {rng.choice(GOOD if positive else BAD)}."
    if rng.random() < 0.4:
        text += f" And the {rng.choice(NOUNS)}, well, it was {rng.choice(NOUNS)}!"
    return text, "positive" if positive else "negative"


def sentences(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [sentence(rng) for _ in range(n)]


def make_tokenizer(texts: list[str]) -> Tokenizer:
    """A BERT-style WordPiece tokenizer learnt on ``texts`` ([CLS] $A [SEP], [PAD] = 0)."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=200, special_tokens=list(SPECIALS)))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return tok


def make_tiny_bert(
    root: Path,
    *,
    name: str = "tiny-bert",
    max_position_embeddings: int = 64,
    seed: int = 0,
    layers: int = 2,
    heads: int = 2,
    hidden: int = 32,
) -> Path:
    """Write a randomly initialised BERT (2 layers of 2 heads, 32 wide unless asked) and its
    tokenizer to ``root/name``; return the folder."""
    folder = Path(root) / name
    folder.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer([text for text, _ in sentences(200, seed)])
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=64,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=tok.token_to_id("[PAD]"),
    )
    torch.manual_seed(seed)
    BertModel(config).save_pretrained(folder)
    tok.save(str(folder / "tokenizer.json"))
    return folder


def write_reviews(path: Path, n: int, seed: int = 0) -> Path:
    """A CSV of ``n`` rows ``text,label`` drawn like the tokenizer's sentences."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "label"])
        writer.writerows(sentences(n, seed))
    return path


def train_tiny_encoder_run(root: Path, *, head: str = "cls", epochs: int = 8, seed: int = 0) -> Path:
    """Fine-tune a fresh tiny BERT on 120 reviews (a few seconds); return the run directory."""
    from attnserve.training.loop.trainer import TrainConfig
    from attnserve.training.run.pipeline import DataSpec, train_run

    root = Path(root)
    checkpoint = make_tiny_bert(root)
    data = write_reviews(root / "reviews.csv", 120, seed)
    result = train_run(
        root / "run",
        "encoder",
        {"head": head},
        TrainConfig(
            epochs=epochs, batch_size=16, lr=3e-3, progress=False, seed=seed, threads=1, word_dropout=0.0
        ),
        DataSpec(path=str(data), seed=seed),
        pretrained=str(checkpoint),
    )
    return result.run_dir


_SHARED: dict[str, Path] = {}  # basetemp -> the session's shared run


def shared_tiny_encoder_run(factory: pytest.TempPathFactory) -> Path:
    """One `train_tiny_encoder_run` per test session (defaults, seed 0), shared read-only by the
    modules that only export or serve it."""
    from attnserve.export.parity import torch_threads

    key = str(factory.getbasetemp())
    if key not in _SHARED:
        with torch_threads(1):
            _SHARED[key] = train_tiny_encoder_run(factory.mktemp("tiny-encoder"))
    return _SHARED[key]
