"""Each family owns its differences: every registered family supplies every part, and code
outside the encoder's own modules decides almost nothing by the encoder's name or by whether
a checkpoint was given."""

from __future__ import annotations

import dataclasses
import io
import re
import tokenize
from pathlib import Path
from typing import Any

import optuna
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from attnserve.training.loop.config import TrainConfig
from attnserve.training.models import FAMILIES, REGISTRY, EncoderConfig, Family
from attnserve.training.models.families import ExportHints, FamilyError, resolve_family
from attnserve.training.text.tokenizer import build_tokenizer

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("training", "export")
# Where the encoder's differences live: its family module and its checkpoint loader.
ENCODER_MODULES = ("training/models/encoder.py", "training/text/pretrained.py")
MAX_ENCODER_BRANCHES = 5
# A decision made by whether --pretrained was given rather than by the family asked for.
PRETRAINED_DECISION = re.compile(
    r"\bpretrained\b[^#\n]*\bis (not )?None|\bif (not )?pretrained\b|\bpretrained else\b"
)
ENCODER_NAMES = re.compile(r"\bENCODER_FAMILY\b|\bencoder_head\b[^#\n]*\bis (not )?None")


def encoder_branches(root: Path) -> list[str]:
    """``path:line`` of each place outside the encoder's modules that names the encoder family
    in code (a string "encoder": comparisons, sets, keys) or decides by --pretrained."""
    found: list[str] = []
    for stage in SCANNED:
        for path in sorted((root / stage).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative in ENCODER_MODULES:
                continue
            found += [f"{relative}:{line}" for line in _branch_lines(path.read_text(encoding="utf-8"))]
    return found


def _branch_lines(source: str) -> list[int]:
    lines: set[int] = set()
    code = source.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.STRING and token.string.strip("\"'") == "encoder":
            lines.add(token.start[0])
        elif token.type == tokenize.COMMENT:  # a comment decides nothing: cut it off its line
            row, col = token.start
            code[row - 1] = code[row - 1][:col]
    for number, text in enumerate(code, start=1):
        if text.lstrip().startswith(('"', "'")):  # docstring lines
            continue
        if PRETRAINED_DECISION.search(text) or ENCODER_NAMES.search(text):
            lines.add(number)
    return sorted(lines)


def test_the_counter_finds_the_branches_it_is_meant_to() -> None:
    source = (
        'if family == "encoder":  # one\n'
        "    pass\n"
        'SKIPPED = frozenset({"encoder"})\n'
        "x = encode_a if pretrained else encode_b\n"
        "if ns.pretrained is not None:\n"
        "    pass\n"
        "if run.family == ENCODER_FAMILY:\n"
        "    pass\n"
        '"""a docstring about the encoder and pretrained is None"""\n'
        "y = 1  # if pretrained is None the comment does not count\n"
        'label = "an encoder"\n'
    )
    assert _branch_lines(source) == [1, 3, 4, 5, 7]


def test_the_encoder_is_a_special_case_in_at_most_five_places() -> None:
    found = encoder_branches(ROOT)
    assert len(found) <= MAX_ENCODER_BRANCHES, "\n".join(found)


def test_every_family_supplies_every_part() -> None:
    assert sorted(REGISTRY) == sorted(FAMILIES)
    tok = build_tokenizer(["the film was great", "the plot was dull"], add_cls=True)
    trainer_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    for name, family in REGISTRY.items():
        assert isinstance(family, Family) and family.name == name and family.model.family == name
        assert FAMILIES[name] is family.model
        config_fields = {f.name for f in dataclasses.fields(family.model.config_cls)}
        assert family.derived <= config_fields | {"vocab_size"}, name
        assert set(family.stand_in) <= family.derived, name
        # A search space draws fields the family's config and the trainer know.
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
        model, training = family.search(study.ask())
        assert model and set(model) <= config_fields, (name, model)
        assert training and set(training) <= trainer_fields, (name, training)
        if family.recipe.training is not None:
            assert {k for k, _ in family.recipe.training} <= trainer_fields, name
        enc = family.encode_texts(tok, ["the film was great and the plot was dull"], 4, "tail")
        assert enc.input_ids.shape == (1, 4) and enc.input_ids[0, 0] == tok.token_to_id("[CLS]")


def test_only_the_checkpoint_families_take_pretrained_and_need_it() -> None:
    tuned = [name for name, family in REGISTRY.items() if family.checkpoint is not None]
    assert tuned == ["encoder"]
    assert not REGISTRY["encoder"].recipe.planned and REGISTRY["encoder"].recipe.training
    assert resolve_family(None, "ckpt", "gru_attention") == "encoder"
    assert resolve_family(None, None, "gru_attention") == "gru_attention"
    with pytest.raises(FamilyError, match="fine-tunes the encoder family, not --model mean_pool"):
        resolve_family("mean_pool", "ckpt", "gru_attention")
    with pytest.raises(FamilyError, match="give --pretrained"):
        resolve_family("encoder", None, "gru_attention")
    with pytest.raises(FamilyError, match="not transformer"):
        REGISTRY["transformer"].tokenizer_source("ckpt")
    assert REGISTRY["transformer"].tokenizer_source(None) is None
    shape = REGISTRY["encoder"].export.fusion_shape
    hf = {"model_type": "bert", "vocab_size": 8, "num_attention_heads": 2, "hidden_size": 16}
    assert shape is not None and shape(EncoderConfig(vocab_size=8, encoder=hf)) == (2, 16)
    assert [n for n, f in REGISTRY.items() if f.export != ExportHints()] == ["encoder"]


def test_encode_texts_keeps_the_special_tokens_at_both_ends() -> None:
    vocab: dict[str, Any] = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
    vocab |= {w: i + 4 for i, w in enumerate(["a", "b", "c", "d", "e", "f"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    text = ["a b c d e f"]
    for side, words in (("head", [4, 5, 6]), ("tail", [7, 8, 9]), ("head+tail", [4, 8, 9])):
        enc = REGISTRY["encoder"].encode_texts(tok, text, 5, side)
        assert enc.input_ids[0].tolist() == [2, *words, 3], side
        assert (enc.lengths[0], enc.full_lengths[0]) == (5, 8)
