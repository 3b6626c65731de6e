"""The tiny BERT of tests/support/tiny_bert.py with BERT's 512 positions, as a served bundle.

Fine-tuned through the real training entry point and exported through the real writer, in
the test, no hub: word pieces, the 512-position limit and `attention=all` replies of 4 MiB
a text (2 layers x 2 heads x 512 x 512 float32). `encoder_repository` builds it once per
test session (about 10 s) and shares it read-only; `with_encoder` adds it to a copy of the
suite's repository, so that one server serves car and bert alike.

`encoder_bundle(..., layers=4, heads=1, positions=1024)` is the same BERT made slow on
purpose: a rollout at its longest length multiplies four 1024 x 1024 maps, a call of a
hundred milliseconds and more, the cost of a real encoder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from attnserve.export.parity import torch_threads
from attnserve.export.writer import export_run
from attnserve.training.loop.trainer import TrainConfig
from attnserve.training.run.pipeline import DataSpec, train_run
from tests.support.tiny_bert import make_tiny_bert, write_reviews

MODEL = "bert"
POSITIONS = 512
_BUILT: dict[str, Path] = {}  # basetemp -> the repository built in that test session


def encoder_bundle(
    root: Path,
    name: str = MODEL,
    *,
    layers: int = 2,
    heads: int = 2,
    positions: int = POSITIONS,
    hidden: int = 32,
) -> Path:
    """Fine-tune a fresh tiny BERT (tiny_bert.make_tiny_bert's, with these sizes) whose max_len
    is its `positions`, export it as `root/models/name/1`; returns the repository (`root/models`)."""
    checkpoint = make_tiny_bert(
        root, max_position_embeddings=positions, layers=layers, heads=heads, hidden=hidden
    )
    data = write_reviews(root / "reviews.csv", 120)
    with torch_threads(1):
        result = train_run(
            root / "run",
            "encoder",
            {"head": "cls"},
            TrainConfig(
                epochs=2, batch_size=16, lr=3e-3, progress=False, seed=0, threads=1, word_dropout=0.0
            ),
            DataSpec(path=str(data), seed=0, max_len=positions),
            pretrained=str(checkpoint),
        )
        export_run(result.run_dir, root / "models", name)
    return root / "models"


def encoder_repository(factory: pytest.TempPathFactory) -> Path:
    """The session's repository holding the 512-position `bert` version 1 (read it, never modify it)."""
    key = str(factory.getbasetemp())
    if key not in _BUILT:
        _BUILT[key] = encoder_bundle(factory.mktemp("bert-512"))
    return _BUILT[key]


def with_encoder(model_repository: Path, factory: pytest.TempPathFactory) -> Path:
    """A copy of `model_repository` (car, pool, bow) with `bert` added (read it, never modify it)."""
    key = f"{factory.getbasetemp()}:{model_repository}"
    if key not in _BUILT:
        root = factory.mktemp("car-and-bert")
        shutil.copytree(model_repository, root, dirs_exist_ok=True)
        shutil.copytree(encoder_repository(factory) / MODEL, root / MODEL)
        _BUILT[key] = root
    return _BUILT[key]
