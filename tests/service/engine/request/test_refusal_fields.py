"""Every refusal of the request path names the request field at fault in `field`, so a front end
places it (V2 under "parameters." or its ATTENTION output) without reading the message, and the
field survives the detaching every answered error goes through."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from attnserve.service.bundle import AttentionKind, AttentionSpec
from attnserve.service.common.vocabulary import AttentionMode, Attribution
from attnserve.service.engine.context import CallContext
from attnserve.service.engine.limits import CallLimits
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.models.tokenization import EncodedTexts, TextTokenizer
from attnserve.service.engine.request.attention import check_request
from attnserve.service.engine.request.attribution import Explain, budgets, check_rows
from attnserve.service.engine.request.cascade import run_cascade
from attnserve.service.engine.request.classify import Inputs, prepare
from attnserve.service.engine.request.predictor import Predictor
from attnserve.service.errors import InvalidArgument, detached

WORDS = ["[UNK]", "a", "white", "car", "red"]
LIMITS = CallLimits(max_texts_per_request=4, max_reply_bytes=1 << 20, max_attribution_rows=512)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> TextTokenizer:
    """Words split on spaces, no template: an empty text has no tokens; at most 3 tokens a text."""
    words = Tokenizer(models.WordLevel({word: i for i, word in enumerate(WORDS)}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path: Path = tmp_path_factory.mktemp("words") / "tokenizer.json"
    words.save(str(path))
    return TextTokenizer(path, 3, reject_long=True, max_text_chars=20)


def _model(
    tokenizer: TextTokenizer, kind: AttentionKind = AttentionKind.SELF, *, cascade: bool = False
) -> LoadedModel:
    """What the refusals read of a version (each is raised before anything else is)."""
    stand_in = SimpleNamespace(
        name="m", attention_kind=kind, tokenizer=tokenizer, cascade=object() if cascade else None
    )
    return cast(LoadedModel, stand_in)


def _texts(tokenizer: TextTokenizer, texts: list[str]) -> None:
    prepare(_model(tokenizer), Inputs(texts=texts), LIMITS)


def _ids(tokenizer: TextTokenizer, rows: list[list[int]]) -> None:
    prepare(_model(tokenizer), Inputs(encoded=EncodedTexts.from_ids(rows)), LIMITS)


def _cascade_ids(tokenizer: TextTokenizer) -> None:
    model, inputs = _model(tokenizer, cascade=True), Inputs(encoded=EncodedTexts.from_ids([[1]]))
    member = cast(Predictor, None)  # refused before either member is reached
    asyncio.run(run_cascade(model, member, member, inputs, LIMITS, cast(CallContext, None)))


NONE_SPEC = AttentionSpec(kind=AttentionKind.NONE, layers=0, heads=0)
POOL_SPEC = AttentionSpec(kind=AttentionKind.POOL, layers=0, heads=0)
FIVE_WORDS = [[[1], [2], [3], [4], [5]]]  # one text's words (token positions per word)

REFUSALS: dict[str, tuple[Callable[[TextTokenizer], object], str]] = {
    "a mode of a model without attention": (
        lambda _: check_request(NONE_SPEC, AttentionMode.POOLED, 0, "m"),
        "attention",
    ),
    "a mode the model does not offer": (
        lambda _: check_request(POOL_SPEC, AttentionMode.ROLLOUT, 0, "m"),
        "attention",
    ),
    "top tokens of a model without attention": (
        lambda _: check_request(NONE_SPEC, AttentionMode.NONE, 3, "m"),
        "top_k",
    ),
    "no text": (lambda t: _texts(t, []), "texts"),
    "too many texts": (lambda t: _texts(t, ["a"] * 5), "texts"),
    "no ids": (lambda t: _ids(t, []), "texts"),
    "a text too long": (lambda t: _texts(t, ["a", "x" * 21]), "texts"),
    "a text without tokens": (lambda t: _texts(t, ["a", ""]), "texts"),
    "a text over max_len": (lambda t: _texts(t, ["a white red car"]), "texts"),
    "an empty row of ids": (lambda t: _ids(t, [[1], []]), "input_ids"),
    "an id outside the vocabulary": (lambda t: _ids(t, [[1, len(WORDS)]]), "input_ids"),
    "ids to a cascade": (_cascade_ids, "input_ids"),
    "a budget over the server's rows": (
        lambda _: budgets(Explain(Attribution.SHAPLEY, 600), FIVE_WORDS, max_rows=512),
        "attribution_budget",
    ),
    "a budget too small for the words": (
        lambda _: budgets(Explain(Attribution.SHAPLEY, 2), FIVE_WORDS, max_rows=512),
        "attribution_budget",
    ),
    "an attribution over the server's rows": (
        lambda _: check_rows(Explain(Attribution.OCCLUSION), 2, 600, max_rows=512),
        "attribution",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_each_refusal_names_its_field(tokenizer: TextTokenizer, case: str) -> None:
    refuse, field = REFUSALS[case]
    with pytest.raises(InvalidArgument) as refused:
        refuse(tokenizer)
    assert refused.value.field == field, refused.value
    assert detached(refused.value).field == field


def test_an_error_without_a_field_has_none() -> None:
    assert InvalidArgument("texts: at least one text is required").field is None
