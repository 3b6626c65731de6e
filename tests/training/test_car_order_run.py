"""A car-order training run reports every evaluation split and honours the tokenizer flags."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer

from attnserve.training.cli.main import build_parser, model_overrides, train_config
from attnserve.training.cli.main import main as train_main
from attnserve.training.data import DEFAULTS, EVAL_SPLITS, HANDWRITTEN, HANDWRITTEN_BLIND, handwritten
from attnserve.training.data.recipe import DATA_TRAINING
from attnserve.training.loop.config import TrainConfig
from attnserve.training.run.checkpoint import load_run


def test_cli_reports_every_split_and_sizes_the_model_by_its_wordpiece_tokenizer(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["--task", "car-order", "--n-pairs", "150", "--model", "transformer", "--n-layers", "1",
            "--d-model", "16", "--epochs", "1", "--no-progress", "--out", str(out),
            "--tokenizer", "wordpiece", "--vocab-size", "5000"]
    assert train_main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(EVAL_SPLITS) == {"template_heldout", "phrasing_heldout", HANDWRITTEN, HANDWRITTEN_BLIND}
    for split in ("val", "test", *EVAL_SPLITS):
        assert 0.0 <= metrics[split]["accuracy"] <= 1.0 and metrics[split]["n"] > 0, split
    labels = ("negative", "positive")
    assert metrics[HANDWRITTEN]["n"] == len(handwritten.load("car-order", labels))
    assert metrics[HANDWRITTEN_BLIND]["n"] == len(handwritten.load("car-order", labels, blind=True))
    assert metrics["tokenizer"] == "wordpiece"
    assert metrics["train_cpu_seconds"] > 0.0 and metrics["train_seconds"] > 0.0

    saved = json.loads((out / "tokenizer.json").read_text())
    assert saved["model"]["type"] == "WordPiece"
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    run = load_run(out)
    # The cap is the tokenizer's; the model's vocabulary is what the tokenizer made.
    assert tok.get_vocab_size() == run.config["vocab_size"] < 5000


def test_a_built_in_task_brings_its_own_training_settings_and_flags_override_them() -> None:
    parser = build_parser()
    own = dict(DEFAULTS["car-order"].training)
    cfg = train_config(parser.parse_args(["--task", "car-order"]))
    assert (cfg.epochs, cfg.lr) == (own["epochs"], own["lr"]) != (TrainConfig.epochs, TrainConfig.lr)
    assert cfg.threads == own["threads"] == 2 != TrainConfig.threads  # fixed: its figures, bit for bit
    argv = ["--task", "car-order", "--lr", "0.002", "--epochs", "3", "--threads", "0"]
    cfg = train_config(parser.parse_args(argv))
    assert (cfg.epochs, cfg.lr, cfg.threads) == (3, 0.002, 0)
    cfg = train_config(parser.parse_args(["--data", "mine.csv"]))  # the task's settings are not yours
    assert (cfg.epochs, cfg.lr, cfg.threads) == (TrainConfig.epochs, dict(DATA_TRAINING)["lr"], 0)


def test_a_built_in_task_brings_its_transformer_recipe_and_flags_override_it() -> None:
    parser = build_parser()
    own = dict(DEFAULTS["car-order"].model)
    assert own == {"n_layers": 2, "n_heads": 2, "positions": "sinusoidal", "pooling": "attention"}
    assert model_overrides(parser.parse_args(["--task", "car-order"])) == own
    argv = ["--task", "car-order", "--positions", "learned", "--n-layers", "3"]
    given = model_overrides(parser.parse_args(argv))
    assert given == {**own, "positions": "learned", "n_layers": 3}
    # Another family, or your own data, trains with that family's own defaults.
    assert model_overrides(parser.parse_args(["--task", "car-order", "--model", "self_attention"])) == {}
    assert model_overrides(parser.parse_args(["--data", "mine.csv"])) == {}
