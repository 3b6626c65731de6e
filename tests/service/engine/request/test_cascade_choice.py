"""Which member of a cascade answers a text depends on the text alone: not on the attention
mode, top_k, the front end or the batch mates; and a cascade's attribution is capped across
both members and refused before any row runs."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnserve.export.cascade import CascadeRequest, export_cascade
from attnserve.export.parity import torch_threads
from attnserve.export.writer import export_run
from attnserve.service.bundle import read_bundle
from attnserve.service.client import Client
from attnserve.training.loop.trainer import TrainConfig
from attnserve.training.run.pipeline import DataSpec, train_run
from tests.support import http
from tests.support.cascades import NAME, serve_alone, set_threshold
from tests.support.servers import RunningServer, free_port, make_settings
from tests.support.tiny_bert import make_tiny_bert, write_reviews

TEXTS = 40
CAP = 64  # the server's max_attribution_rows


@dataclass(frozen=True)
class Served:
    server: RunningServer
    client: Client
    port: int
    texts: list[str]  # the texts nearest the threshold first
    threshold: float
    student: str  # the student served alone under its own name


def _tops(client: Client, model: str, texts: list[str], **options: Any) -> np.ndarray:
    return np.array([r.probabilities.max() for r in client.classify(texts, model=model, **options).results])


def _duo(root: Path) -> tuple[Path, Path]:
    """A cascade of the tiny BERT (student: an int8 label graph, its gate opened wide so the
    two graphs differ) and a small transformer (teacher), trained on the same reviews; returns
    the version folder and the teacher's run (its test texts)."""
    data = write_reviews(root / "reviews.csv", 160)
    config = TrainConfig(
        epochs=2, batch_size=16, lr=3e-3, progress=False, seed=0, threads=1, word_dropout=0.0
    )
    spec = DataSpec(path=str(data), seed=0)
    small = {"d_model": 8, "n_layers": 1, "n_heads": 2}
    with torch_threads(1):
        bert = str(make_tiny_bert(root))
        student = train_run(root / "student", "encoder", {"head": "cls"}, config, spec, pretrained=bert)
        teacher = train_run(root / "teacher", "transformer", small, config, spec)
    bundle = export_run(student.run_dir, root / "members", "bert", max_accuracy_drop=1.0, int8_tolerance=1e9)
    request = CascadeRequest(student=bundle, teacher=teacher.run_dir, repository=root / "models", name=NAME,
                             max_drop=1.0)  # fmt: skip
    return export_cascade(request), teacher.run_dir


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("cascade-choice")
    version, teacher_run = _duo(root)
    repository = root / "models"
    student = serve_alone(version, repository, "student")
    label_graph = read_bundle(version / "student").manifest.label_graph
    assert label_graph is not None and label_graph.quantization is not None, (
        "the student needs an int8 label graph"
    )
    lines = (teacher_run / "test.jsonl").read_text().splitlines()
    texts = [json.loads(line)["text"] for line in lines if line.strip()][:TEXTS]
    with (
        RunningServer(make_settings(repository, http_port=free_port())) as alone,
        Client(alone.target) as client,
    ):
        # Each text alone: the float32 graph (attention asked) and the int8 label graph (none).
        f32 = np.array([_tops(client, student, [t], attention="pooled")[0] for t in texts])
        int8 = np.array([_tops(client, student, [t])[0] for t in texts])
    # The threshold between the two graphs' confidences of the text they differ on most: a
    # choice made on whichever graph the call happens to use would send it to either member.
    pick = int(np.argmax(np.abs(f32 - int8)))
    assert abs(f32[pick] - int8[pick]) > 1e-4, "the graphs must differ for the test to mean anything"
    threshold = float((f32[pick] + int8[pick]) / 2)
    # Keep clear of float32's last-bit noise: no float32 confidence within 1e-5 of it.
    assert np.min(np.abs(f32 - threshold)) > 1e-5
    set_threshold(version, threshold)
    near = sorted(range(len(texts)), key=lambda i: abs(f32[i] - threshold))
    assert abs(f32[near[3]] - threshold) < 0.01 or len(texts) < 4, "texts within 0.01 of the threshold"
    settings = make_settings(repository, http_port=free_port(), max_attribution_rows=CAP)
    with RunningServer(settings) as server, Client(server.target, timeout=30) as client:
        assert server.server is not None
        yield Served(server, client, server.server.http_port, [texts[i] for i in near], threshold, student)


def _members_native(served: Served, texts: list[str], **options: Any) -> list[str]:
    return [r.answered_by for r in served.client.classify(texts, model=NAME, **options).results]


def _members_json(served: Served, texts: list[str], **fields: Any) -> list[str]:
    reply = http.classify(served.port, NAME, {"texts": texts, **fields})
    assert reply.status == 200, reply.body
    return [r["answered_by"] for r in reply.json()["results"]]


def _members_v2(served: Served, texts: list[str]) -> list[str]:
    outputs: list[dict[str, Any]] = [{"name": "ANSWERED_BY"}, {"name": "LABEL"}]
    document = {
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts), 1], "data": texts}],
        "outputs": outputs,
    }
    reply = http.call(served.port, "POST", f"/v2/models/{NAME}/infer", document)
    assert reply.status == 200, reply.body
    (tensor,) = [t for t in reply.json()["outputs"] if t["name"] == "ANSWERED_BY"]
    return list(tensor["data"])


def test_the_member_that_answers_depends_on_the_text_alone(served: Served) -> None:
    texts = served.texts
    reference = _members_native(served, texts)
    assert {"student", "teacher"} <= set(reference)
    seen = {
        "native, attention": _members_native(served, texts, attention="pooled"),
        "native, top_k": _members_native(served, texts, top_k=2),
        "native, one at a time": [_members_native(served, [t])[0] for t in texts[:8]] + reference[8:],
        "native, reversed mates": _members_native(served, texts[::-1])[::-1],
        "json": _members_json(served, texts),
        "json, attention": _members_json(served, texts, attention="pooled"),
        # V2 declares no ATTENTION for this cascade: one tensor cannot hold both members' shapes.
        "v2 rest": _members_v2(served, texts),
    }
    for how, members in seen.items():
        assert members == reference, how


def test_the_file_tool_chooses_as_every_other_front_end(served: Served, tmp_path: Path) -> None:
    # The file tool asks a cascade no attention (its members' maps differ in shape).
    source = tmp_path / "texts.csv"
    source.write_text("text\n" + "".join(f'"{t}"\n' for t in served.texts))
    written = tmp_path / "labelled.jsonl"
    served.client.classify_file(source, written, model=NAME, batch_size=5)
    members = [json.loads(line)["answered_by"] for line in written.read_text().splitlines() if line.strip()]
    assert members == _members_native(served, served.texts, attention="pooled")


def test_a_cascade_attribution_is_capped_across_both_members_before_any_row_runs(served: Served) -> None:
    """Each text counts at the larger of its two members' rows, whichever answers it; a call
    over the cap is refused before the student's rows run, not after them."""
    long = " ".join(served.texts[:6])  # cut at each member's max_len
    alone = http.classify(served.port, served.student, {"texts": [long], "attribution": "occlusion"})
    rows = alone.json()["results"][0]["attribution_rows"]
    copies = CAP // rows + 1  # over the cap on the student alone, whoever answers
    before = served.server.value("attnserve_graph_batches_total")
    refused = http.classify(served.port, NAME, {"texts": [long] * copies, "attribution": "occlusion"})
    assert refused.status == 400 and "allows 64 in one call" in refused.error["message"], refused.body
    assert served.server.value("attnserve_graph_batches_total") == before
    fits = http.classify(served.port, NAME, {"texts": served.texts[:2], "attribution": "occlusion"})
    assert fits.status == 200, fits.body
    for result in fits.json()["results"]:
        words = [t for t, special in zip(result["tokens"], result["special"], strict=True) if not special]
        assert len(result["attribution"]) == len(result["tokens"]) and result["attribution_rows"] <= len(
            words
        )


def test_a_cascade_explains_each_text_on_the_member_and_graph_that_answered_it(served: Served) -> None:
    """A text the student answers is explained on the student's float32 graph, the one that
    answered it: its scores are those of the student asked alone on that graph (attention
    asked), not of its int8 label graph."""
    members = _members_native(served, served.texts)
    # Up to two of each: the threshold sits on the text the graphs differ on most, which can
    # leave a single text on one side of it.
    chosen = {
        m: [t for t, a in zip(served.texts, members, strict=True) if a == m][:2]
        for m in ("student", "teacher")
    }
    assert chosen["student"] and chosen["teacher"], members
    texts = chosen["student"] + chosen["teacher"]
    reply = http.classify(served.port, NAME, {"texts": texts, "attribution": "occlusion"})
    assert reply.status == 200, reply.body
    results = reply.json()["results"]
    assert [r["answered_by"] for r in results] == [m for m in ("student", "teacher") for _ in chosen[m]]
    for text, result in zip(texts, results, strict=True):
        assert result["answered_by"] == _members_native(served, [text])[0]
        if result["answered_by"] != "student":
            continue
        body = {"texts": [text], "attribution": "occlusion", "attention": "pooled"}
        alone = http.classify(served.port, served.student, body).json()["results"][0]
        assert result["tokens"] == alone["tokens"] and result["label"] == alone["label"]
        np.testing.assert_allclose(result["probabilities"], alone["probabilities"], atol=1e-6)
        np.testing.assert_allclose(result["attribution"], alone["attribution"], atol=1e-5)


def test_a_refusal_by_both_members_is_answered_once_and_nothing_is_left_unretrieved(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    """Both members refuse a shapley budget too few for the words: the call is refused with one
    of their messages, and the other's failure is not left for asyncio to log as lost."""
    body = {"texts": ["the plot and the cast"], "attribution": "shapley", "attribution_budget": 2}
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        refused = http.classify(served.port, NAME, body)
        served.server.run(asyncio.sleep(0.1))
        gc.collect()
        served.server.run(asyncio.sleep(0.1))
    assert refused.status == 400 and "shapley needs at least" in refused.error["message"], refused.body
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
