"""--init-embeddings: word2vec binary/text and GloVe text made here with gensim, coverage, freezing."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from gensim.models import Word2Vec

from attnserve.training.cli.main import main
from attnserve.training.run.checkpoint import load_run
from attnserve.training.text.embeddings import load_vectors
from tests.training.sentences import write_sentences

WIDTH = 12


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vectors")
    write_sentences(root / "train.csv", 200, seed=0)
    write_sentences(root / "val.csv", 40, seed=1)
    with open(root / "train.csv", encoding="utf-8") as fh:
        sentences = [row["sentence"].split() for row in csv.DictReader(fh)]
    # The vectors leave out "ending": one word of the vocabulary without a vector.
    sentences = [[w for w in s if w != "ending"] for s in sentences]
    model = Word2Vec(sentences, vector_size=WIDTH, min_count=1, window=3, epochs=5, seed=0, workers=1)
    model.wv.save_word2vec_format(str(root / "w2v.txt"), binary=False)
    model.wv.save_word2vec_format(str(root / "w2v.bin"), binary=True)
    # GloVe's text format: the same lines without the "count dim" header.
    lines = (root / "w2v.txt").read_text(encoding="utf-8").splitlines()[1:]
    (root / "glove.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.mark.parametrize("name", ["w2v.txt", "w2v.bin", "glove.txt"])
def test_every_format_reads_to_the_same_vectors(corpus: Path, name: str) -> None:
    reference = load_vectors(corpus / "w2v.txt")
    vectors = load_vectors(corpus / name)
    assert vectors.vector_size == WIDTH and set(vectors.key_to_index) == set(reference.key_to_index)
    np.testing.assert_allclose(vectors["good"], reference["good"], rtol=1e-5, atol=1e-6)


def _train(corpus: Path, out: Path, *flags: str) -> dict[str, object]:
    args = ["--data", str(corpus / "train.csv"), "--val-data", str(corpus / "val.csv")]
    args += ["--text-column", "sentence", "--model", "attention_pool", "--epochs", "2", "--threads", "1"]
    assert main([*args, "--out", str(out), *flags]) == 0
    metrics: dict[str, object] = json.loads((out / "metrics.json").read_text())
    return metrics


def _embedding(run: Path) -> tuple[torch.Tensor, dict[str, int]]:
    model = load_run(run).model
    vocab = json.loads((run / "tokenizer.json").read_text())["model"]["vocab"]
    embed = model.get_submodule("embed")
    assert isinstance(embed, torch.nn.Embedding)
    return embed.weight.detach(), vocab


def test_coverage_is_reported_and_a_frozen_embedding_keeps_the_vectors(corpus: Path, tmp_path: Path) -> None:
    vectors = load_vectors(corpus / "glove.txt")
    metrics = _train(
        corpus, tmp_path / "frozen", "--init-embeddings", str(corpus / "glove.txt"), "--freeze-embeddings"
    )
    figures = metrics["data"]["embeddings"]  # type: ignore[index]
    words = len(vectors.key_to_index) + 1  # every training word has a vector except "ending"
    assert figures["vocabulary_found"] == words - 1 and figures["frozen"] is True
    assert figures["vocabulary_coverage"] == pytest.approx((words - 1) / words, abs=1e-4)

    weight, vocab = _embedding(tmp_path / "frozen")
    assert weight.shape[1] == WIDTH  # --d-model followed the vectors
    good, bad = weight[vocab["good"]].numpy(), weight[vocab["bad"]].numpy()
    # Frozen rows are the vectors, scaled by one factor: the ratio is the same for every word.
    ratio = good / vectors["good"]
    np.testing.assert_allclose(ratio, np.full(WIDTH, ratio[0]), rtol=1e-4)
    np.testing.assert_allclose(bad / vectors["bad"], np.full(WIDTH, ratio[0]), rtol=1e-4)

    _train(corpus, tmp_path / "tuned", "--init-embeddings", str(corpus / "w2v.bin"))
    tuned, vocab = _embedding(tmp_path / "tuned")
    assert not np.allclose(tuned[vocab["good"]].numpy() / vectors["good"], ratio[0], rtol=1e-3)


def test_bad_vector_files_and_widths_are_refused_in_one_line(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "junk.txt").write_text("this is not\na vector file at all\n", encoding="utf-8")
    assert _exit(corpus, tmp_path, "--init-embeddings", str(tmp_path / "junk.txt")) == 2
    assert "is not word2vec/GloVe text vectors" in capsys.readouterr().err
    assert _exit(corpus, tmp_path, "--init-embeddings", str(corpus / "w2v.txt"), "--d-model", "16") == 2
    assert "--d-model 12" in capsys.readouterr().err
    assert _exit(corpus, tmp_path, "--freeze-embeddings") == 2
    assert "--freeze-embeddings needs --init-embeddings" in capsys.readouterr().err


def _exit(corpus: Path, tmp_path: Path, *flags: str) -> int:
    args = [
        "--data",
        str(corpus / "train.csv"),
        "--val-data",
        str(corpus / "val.csv"),
        "--text-column",
        "sentence",
    ]
    return main([*args, "--model", "attention_pool", "--epochs", "1", "--out", str(tmp_path / "x"), *flags])
