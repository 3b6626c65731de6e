"""`python -m bench explain --tiny` on a tiny BERT and a tiny gru_attention model, each trained on
reviews whose adjective alone decides the label, and a tiny Hugging Face classifier imported from
its folder (Integrated Gradients on the transformers model itself): every method's row, finite
figures in range."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from attnserve.export.cli import main as export_main
from attnserve.export.parity import torch_threads
from attnserve.export.writer import export_run
from attnserve.training.loop.trainer import TrainConfig
from attnserve.training.run.pipeline import DataSpec, train_run
from bench.cli import main
from bench.serving.explain import CLS, IG, OCCLUSION, POOLED, RANDOM, ROLLOUT, SHAPLEY
from bench.serving.faithfulness import KS
from tests.export.hf_classifiers import ARCHITECTURES, save_classifier
from tests.support.tiny_bert import shared_tiny_encoder_run, write_reviews


@pytest.mark.slow  # two tiny models trained and exported, a server, Captum: about 20 s
def test_the_explain_section_scores_every_method_of_both_models(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    reviews = write_reviews(tmp_path / "reviews.csv", 160, seed=1)
    with torch_threads(1):
        bert = shared_tiny_encoder_run(tmp_path_factory)
        gru = train_run(
            tmp_path / "gru", "gru_attention", {"d_model": 16, "dropout": 0.0},
            TrainConfig(epochs=6, batch_size=16, lr=1e-2, progress=False, seed=0, threads=1),
            DataSpec(path=str(reviews), seed=0),
        ).run_dir  # fmt: skip
    repository = tmp_path / "models"
    export_run(bert, repository, "bert")
    export_run(gru, repository, "gru")
    folder = save_classifier(ARCHITECTURES["bert"], tmp_path / "hf")
    assert export_main([str(folder), "--repository", str(repository), "--name", "hf", "--no-latency"]) == 0
    texts = write_reviews(tmp_path / "texts.csv", 40, seed=2)
    out, docs = tmp_path / "explain.json", tmp_path / "docs"
    argv = ["explain", "--tiny", "--repository", str(repository), f"bert={bert}", f"gru={gru}",
            f"hf={folder}", "--texts", str(texts), "--text-column", "text", "--count", "24",
            "--out", str(out), "--publish", str(docs)]  # fmt: skip
    assert main(argv) == 0
    document = json.loads(out.read_text())
    models = {model["model"]: model for model in document["models"]}
    methods = {name: [row["method"] for row in model["rows"]] for name, model in models.items()}
    assert methods == {
        "bert": [RANDOM, POOLED, CLS, ROLLOUT, OCCLUSION, SHAPLEY, IG],
        "gru": [RANDOM, POOLED, OCCLUSION, SHAPLEY, IG],  # attention pooling: one weight per token
        "hf": [RANDOM, POOLED, CLS, ROLLOUT, OCCLUSION, SHAPLEY, IG],  # IG through transformers
    }
    for model in models.values():
        assert model["texts"] == 24 and model["ig_steps"] == 4 and model["words"] > 2
        for row in model["rows"]:
            figures = [row["comprehensiveness"], row["sufficiency"], *row["comprehensiveness_at"],
                       *row["sufficiency_at"]]  # fmt: skip
            assert len(row["comprehensiveness_at"]) == len(row["sufficiency_at"]) == len(KS)
            assert all(math.isfinite(v) and -1 <= v <= 1 for v in figures), row
            assert math.isclose(row["comprehensiveness"], sum(row["comprehensiveness_at"]) / len(KS))
            if row["method"] == RANDOM:
                assert row["ms"] is None and row["forward_rows"] is None
            else:
                assert row["ms"] > 0 and row["forward_rows"] >= 1
        by = {row["method"]: row for row in model["rows"]}
        # Shapley: --budget 8 coalitions, raised to words + 1 for a longer text, less the text itself
        # (its value is the reply's), so at most max(7, words) rows a text.
        assert by[IG]["forward_rows"] == 4 and 1 <= by[SHAPLEY]["forward_rows"] <= model["words"] + 7
        assert by[OCCLUSION]["forward_rows"] == pytest.approx(model["words"])  # a row per word
    # One adjective decides the label, and removing the word occlusion ranks first removes it.
    bert_rows = {row["method"]: row for row in models["bert"]["rows"]}
    assert bert_rows[OCCLUSION]["comprehensiveness"] >= bert_rows[RANDOM]["comprehensiveness"]
    page = (docs / "results" / "explanations.md").read_text()
    assert "<!-- explain:begin -->" in page and "| occlusion |" in page
    assert "### gru (v1, gru_attention)" in page
