"""A pretrained-encoder bundle served end to end: a tiny BERT fine-tuned in the test, exported,
served on 127.0.0.1 and explained over attnserve.v1 (gRPC), the JSON API and V2.

The replies carry the tokens as the model saw them (word pieces between [CLS] and [SEP]),
each with its characters in the request text and a flag for the tokenizer's added tokens;
attention comes in every mode with the encoder's layers and heads; the served logits are the
PyTorch model's, also for a model trained on the tails of long texts.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from tokenizers import Tokenizer

from attnserve.export.parity import run_torch, torch_threads
from attnserve.export.writer import export_run
from attnserve.service.bundle import read_bundle
from attnserve.service.client import Client
from attnserve.service.engine.models.tokenization import TextTokenizer
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from attnserve.training.data.encoding import encode_texts
from attnserve.training.loop.trainer import TrainConfig
from attnserve.training.run.checkpoint import load_run
from attnserve.training.run.pipeline import DataSpec, train_run
from tests.support import http
from tests.support.fuzzing import call
from tests.support.methods import CLASSIFY
from tests.support.servers import RunningServer, free_port, make_settings
from tests.support.tiny_bert import (
    BAD,
    GOOD,
    NOUNS,
    make_tiny_bert,
    make_tokenizer,
    sentences,
    shared_tiny_encoder_run,
)
from tests.support.v2 import V2Calls, output, text_request

MODEL = "bert"
TEXTS = [
    "The plot was superb.",
    "The ending was terrible, and the music, well, it was dull!",
    "the cast was lovely",
]
MODES = ("pooled", "last_layer", "all", "rollout")
TAIL_MAX_LEN = 16  # the long reviews are about 22 tokens


@pytest.fixture(scope="module")
def encoder_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_tiny_encoder_run(tmp_path_factory)


@pytest.fixture(scope="module")
def server(encoder_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repository = tmp_path_factory.mktemp("encoder-serving") / "models"
    export_run(encoder_run, repository, MODEL)
    with RunningServer(make_settings(repository, http_port=free_port())) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[Client]:
    with Client(server.target, timeout=30) as connected:
        yield connected


def _check_pieces(text: str, tokens: list[str], offsets: list[tuple[int, int]], special: list[bool]) -> None:
    """[CLS] first and [SEP] last, flagged special with [0, 0]; every other token's offsets
    point at the characters it was read from."""
    assert len(tokens) == len(offsets) == len(special)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]", tokens
    assert special == [True] + [False] * (len(tokens) - 2) + [True]
    assert offsets[0] == offsets[-1] == (0, 0)
    for token, (start, end) in zip(tokens[1:-1], offsets[1:-1], strict=True):
        assert 0 <= start < end <= len(text)
        if token != "[UNK]":
            assert text[start:end].lower() == token.removeprefix("##"), (token, text[start:end])
    starts = [start for start, _ in offsets[1:-1]]
    assert starts == sorted(starts)


def test_model_info_describes_every_layer_and_head(client: Client) -> None:
    info = client.model(MODEL)
    assert info.family == "encoder"
    assert (info.attention_layers, info.attention_heads) == (2, 2)
    assert info.attention_shapes["ATTENTION_MODE_ALL"] == "[2, 2, n, n]"
    assert info.attention_shapes["ATTENTION_MODE_LAST_LAYER"] == "[2, n, n]"


def test_native_replies_carry_word_pieces_offsets_and_special_flags(client: Client) -> None:
    reply = client.classify(TEXTS, model=MODEL)
    for text, result in zip(TEXTS, reply.results, strict=True):
        _check_pieces(text, result.tokens, result.offsets, result.special)
        assert result.truncated is False


@pytest.mark.parametrize("mode", MODES)
def test_every_attention_mode_has_the_encoders_shape(client: Client, mode: str) -> None:
    reply = client.classify(TEXTS, model=MODEL, attention=mode)
    for result in reply.results:
        n = len(result.tokens)
        expected = {"pooled": (n, n), "last_layer": (2, n, n), "all": (2, 2, n, n), "rollout": (n, n)}
        assert result.attention is not None and result.attention.shape == expected[mode]
        np.testing.assert_allclose(result.attention.sum(axis=-1), 1.0, atol=1e-4)


def test_served_logits_are_the_pytorch_models(client: Client, encoder_run: Path) -> None:
    run = load_run(encoder_run)
    tokenizer = Tokenizer.from_file(str(run.tokenizer_path))
    reply = client.classify(TEXTS, model=MODEL, attention="all")
    for text, result in zip(TEXTS, reply.results, strict=True):
        encoding = tokenizer.encode(text)
        assert result.tokens == encoding.tokens
        ids = np.asarray([encoding.ids], dtype=np.int64)  # [1, n]
        reference = run_torch(run.model, ids, np.ones_like(ids))
        np.testing.assert_allclose(result.logits, reference.logits[0], atol=1e-4)
        assert reference.attention is not None and result.attention is not None
        np.testing.assert_allclose(result.attention, reference.attention[0], atol=1e-4)


def test_a_long_text_is_cut_to_max_len_and_keeps_its_sep(client: Client) -> None:
    max_len = client.model(MODEL).max_len
    text = " ".join(["the plot was superb and the cast was lovely"] * max_len)
    result = client.classify(text, model=MODEL, attention="last_layer").results[0]
    assert result.truncated is True and len(result.tokens) == max_len
    _check_pieces(text, result.tokens, result.offsets, result.special)
    assert result.attention is not None and result.attention.shape == (2, max_len, max_len)


def test_the_json_api_carries_the_same_tokens_offsets_and_attention(
    client: Client, server: RunningServer
) -> None:
    assert server.server is not None
    native = client.classify(TEXTS, model=MODEL, attention="all").results
    for mode in MODES:
        reply = http.classify(server.server.http_port, MODEL, {"texts": TEXTS, "attention": mode})
        assert reply.status == 200, reply.body[:300]
        for text, result, expected in zip(TEXTS, reply.json()["results"], native, strict=True):
            offsets = [tuple(span) for span in result["offsets"]]
            _check_pieces(text, result["tokens"], offsets, result["special"])
            assert result["tokens"] == expected.tokens and offsets == expected.offsets
            n = len(result["tokens"])
            shape = {"pooled": (n, n), "last_layer": (2, n, n), "all": (2, 2, n, n), "rollout": (n, n)}
            assert np.asarray(result["attention"]).shape == shape[mode]
            if mode == "all":
                assert expected.attention is not None
                np.testing.assert_allclose(result["attention"], expected.attention, atol=1e-6)


def test_v2_returns_the_pooled_attention_padded_to_the_longest_text(
    client: Client, server: RunningServer
) -> None:
    native = client.classify(TEXTS, model=MODEL, attention="pooled").results
    v2 = V2Calls(server.target)
    try:
        reply = v2.infer(text_request(MODEL, TEXTS, outputs=["LOGITS", "ATTENTION", "LENGTHS"]))
    finally:
        v2.close()
    lengths = output(reply, "LENGTHS").tolist()
    assert lengths == [len(result.tokens) for result in native]
    attention = output(reply, "ATTENTION")
    assert attention.shape == (len(TEXTS), max(lengths), max(lengths))
    for row, (n, result) in enumerate(zip(lengths, native, strict=True)):
        assert result.attention is not None
        np.testing.assert_allclose(attention[row, :n, :n], result.attention, atol=1e-6)
        assert not attention[row, n:, :].any() and not attention[row, :, n:].any()
    np.testing.assert_allclose(output(reply, "LOGITS"), [r.logits for r in native], atol=1e-5)


def test_a_reply_over_the_size_limit_is_refused_clearly(encoder_run: Path, tmp_path: Path) -> None:
    repository = tmp_path / "models"
    max_len = read_bundle(export_run(encoder_run, repository, MODEL)).manifest.max_len
    long = " ".join(["the plot was superb and the cast was lovely"] * max_len)  # cut to max_len tokens
    # Four texts: every layer and head (2 x 2 maps a text) is twice the limit, pooled half of it.
    limit = 4 * 2 * 4 * max_len * max_len
    settings = make_settings(repository, max_reply_bytes=limit, http_port=free_port())
    with RunningServer(settings) as running:
        every = pb.ClassifyRequest(model=MODEL, texts=[long] * 4, attention=pb.ATTENTION_MODE_ALL)
        code, message = call(running.target, CLASSIFY, every.SerializeToString())
        assert code == "RESOURCE_EXHAUSTED" and "max_reply_bytes" in message, message
        pooled = pb.ClassifyRequest(model=MODEL, texts=[long] * 4, attention=pb.ATTENTION_MODE_POOLED)
        assert call(running.target, CLASSIFY, pooled.SerializeToString()) == ("OK", "")
        assert running.server is not None
        refused = http.classify(running.server.http_port, MODEL, {"texts": [long] * 4, "attention": "all"})
        assert refused.status == 429 and refused.error["code"] == "RESOURCE_EXHAUSTED"
        assert "max_reply_bytes" in refused.error["message"]
        assert "retry-after" not in refused.headers  # the same request would be refused again


def _long_review(rng: random.Random) -> tuple[str, str]:
    """A review whose label is in its last words: a first sentence whose adjective is drawn
    independently of the label, a filler, then the sentence that decides."""
    positive = rng.random() < 0.5
    opening = f"The {rng.choice(NOUNS)} was {rng.choice(GOOD + BAD)}."
    filler = f"And the {rng.choice(NOUNS)}, well, it was {rng.choice(NOUNS)}!"
    verdict = f"The {rng.choice(NOUNS)} was {rng.choice(GOOD if positive else BAD)}."
    return f"{opening} {filler} {verdict}", "positive" if positive else "negative"


@pytest.fixture(scope="module")
def tail_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny BERT fine-tuned with --truncation tail on reviews longer than its max_len."""
    root = tmp_path_factory.mktemp("tail")
    rng = random.Random(1)
    data = root / "long.csv"
    with open(data, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([("text", "label"), *(_long_review(rng) for _ in range(160))])
    with torch_threads(1):
        return train_run(
            root / "run",
            "encoder",
            {"head": "cls"},
            TrainConfig(
                epochs=8, batch_size=16, lr=3e-3, progress=False, seed=0, threads=1, word_dropout=0.0
            ),
            DataSpec(path=str(data), seed=0, max_len=TAIL_MAX_LEN, truncation="tail"),
            pretrained=str(make_tiny_bert(root)),
        ).run_dir


def test_a_tail_trained_encoder_is_served_the_tails_of_long_texts(tail_run: Path, tmp_path: Path) -> None:
    repository = tmp_path / "models"
    # float32 label graph too: the logits below are compared with PyTorch's at float tolerance
    bundle = read_bundle(export_run(tail_run, repository, MODEL, quantize="none"))
    assert bundle.manifest.truncation == "tail"
    # The checkpoint's tokenizer.json says nothing of the tail: the manifest carries it.
    assert bundle.tokenizer_path.read_bytes() == (tail_run / "tokenizer.json").read_bytes()
    rng = random.Random(2)
    reviews = [_long_review(rng) for _ in range(12)]
    texts = [text for text, _ in reviews]
    run = load_run(tail_run)
    tokenizer = Tokenizer.from_file(str(run.tokenizer_path))
    trained = encode_texts(tokenizer, texts, run.max_len, "tail")  # as the trainer cut them
    ids = trained.input_ids.astype(np.int64)  # [N, max_len]
    mask = (np.arange(ids.shape[1])[None, :] < trained.lengths[:, None]).astype(np.int64)  # [N, max_len]
    reference = run_torch(run.model, ids, mask)
    settings = make_settings(repository, http_port=free_port())
    with RunningServer(settings) as running, Client(running.target, timeout=30) as client:
        results = client.classify(texts, model=MODEL).results
    for row, (text, result) in enumerate(zip(texts, results, strict=True)):
        assert result.truncated is True and len(result.tokens) == TAIL_MAX_LEN, text
        assert result.tokens[-3:] == tokenizer.encode(text).tokens[-3:]  # the verdict and [SEP]
        np.testing.assert_allclose(result.logits, reference.logits[row], atol=1e-4)
        assert result.label_id == int(reference.logits[row].argmax())
    # Trained on the verdicts, the model reads them: most long texts get their label.
    right = sum(result.label == label for result, (_, label) in zip(results, reviews, strict=True))
    assert right >= 10, right


def test_the_manifests_side_wins_and_without_one_the_tokenizer_file_decides(tmp_path: Path) -> None:
    tokenizer = make_tokenizer([text for text, _ in sentences(200)])
    tokenizer.enable_truncation(max_length=8, direction="left")  # a file that says "keep the tail"
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    text = "the plot was superb and the cast was lovely but the ending was dull"
    tokenizer.no_truncation()
    words = tokenizer.encode(text).tokens[1:-1]

    def kept(truncation: Literal["head", "tail"] | None) -> list[str]:
        served = TextTokenizer(path, 8, reject_long=False, max_text_chars=1000, truncation=truncation)
        return served.encode([text]).tokens(0)

    assert kept("head") == ["[CLS]", *words[:6], "[SEP]"]
    assert kept("tail") == ["[CLS]", *words[-6:], "[SEP]"]
    assert kept(None) == kept("tail")  # a bundle written before the manifest recorded a side
