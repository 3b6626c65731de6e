"""An encoder version's two graphs, served: label calls by the label graph, attention calls
by the float32 attention graph, never one batch for both.

A tiny BERT fine-tuned in the test is exported with an int8 label graph (a generous gate, so
the int8 form is chosen); its logits differ from the float32 graph's, which tells which graph
answered a call. A real server answers calls over gRPC, one at a time and many at once with
both kinds mixed; each reply's logits are those of the graph its kind must reach, computed
here with onnxruntime directly on the same token ids (in a shared batch, int8 logits shift
with the batch's activation scale, so there a label reply is only told apart from float32).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import onnxruntime as ort
import pytest

from attnserve.export.writer import export_run
from attnserve.service.bundle import read_bundle
from attnserve.service.client import Client
from attnserve.service.engine.models.runtime import pad_ids
from attnserve.service.engine.models.tokenization import TextTokenizer
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from tests.support import http
from tests.support.methods import CLASSIFY
from tests.support.servers import RunningServer, free_port, make_settings
from tests.support.tiny_bert import shared_tiny_encoder_run

TEXTS = [
    "the plot was superb and the cast was lovely",
    "a dull and tiresome film",
    "lovely",
    "the acting is superb, but the plot never quite comes together",
]
NONE, POOLED = pb.ATTENTION_MODE_NONE, pb.ATTENTION_MODE_POOLED
GRAPHS = ("attention", "label")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("two-graphs")
    run = shared_tiny_encoder_run(tmp_path_factory)
    export_run(run, root / "models", "bert", max_accuracy_drop=1.0)
    return root / "models"


@pytest.fixture(scope="module")
def expected(repository: Path) -> dict[int, np.ndarray]:
    """Each graph's logits for TEXTS, one text at a time: {NONE: label graph, POOLED: attention graph}."""
    bundle = read_bundle(repository / "bert" / "1")
    manifest = bundle.manifest
    assert manifest.label_graph is not None and manifest.label_graph.quantization is not None
    assert bundle.label_model_path is not None
    tokenizer = TextTokenizer(
        bundle.tokenizer_path,
        manifest.max_len,
        reject_long=False,
        max_text_chars=10_000,
        truncation=manifest.truncation,
    )
    out: dict[int, np.ndarray] = {}
    for mode, path in ((NONE, bundle.label_model_path), (POOLED, bundle.model_path)):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        rows = []
        for ids in tokenizer.encode(TEXTS).ids:
            feed, mask = pad_ids([ids], manifest.pad_id)
            rows.append(session.run(["logits"], {"input_ids": feed, "attention_mask": mask})[0][0])
        out[mode] = np.stack(rows)  # [texts, C]
    # The test can tell the graphs apart on the texts whose int8 logits stray from their float32
    # ones (how far each strays depends on the run's weights): at least two texts must.
    assert distinct(out).sum() >= 2, np.abs(out[NONE] - out[POOLED]).max(axis=1)
    return out


def distinct(expected: dict[int, np.ndarray]) -> np.ndarray:
    """Per text, whether its two graphs' logits differ by more than a reply's tolerance allows."""
    return np.asarray(np.abs(expected[NONE] - expected[POOLED]).max(axis=1) > 1e-4)


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[RunningServer]:
    with RunningServer(make_settings(repository, http_port=free_port())) as running:
        yield running


@pytest.fixture(scope="module")
def target(server: RunningServer) -> str:
    return server.target


def _classify(target: str, index: int, mode: pb.AttentionMode) -> np.ndarray:
    request = pb.ClassifyRequest(model="bert", texts=[TEXTS[index]], attention=mode)
    with grpc.insecure_channel(target) as channel:
        raw = channel.unary_unary(CLASSIFY, None, None)(request.SerializeToString(), timeout=30)
    result = pb.ClassifyResponse.FromString(raw).results[0]
    assert result.HasField("attention") == (mode != NONE)
    return np.asarray(result.logits, np.float32)


@pytest.mark.parametrize("mode", [NONE, POOLED])
def test_each_kind_of_call_is_answered_by_its_graph(
    target: str, expected: dict[int, np.ndarray], mode: pb.AttentionMode
) -> None:
    other = POOLED if mode == NONE else NONE
    for index, apart in enumerate(distinct(expected)):
        logits = _classify(target, index, mode)
        np.testing.assert_allclose(logits, expected[mode][index], atol=2e-5)
        if apart:  # and not the other graph's
            assert np.abs(logits - expected[other][index]).max() > 5e-5


def test_the_model_listing_names_the_label_graphs_form(server: RunningServer) -> None:
    with Client(server.target, timeout=30) as client:
        assert client.model("bert").label_graph == "int8"
    port = server.server.http_port if server.server is not None else 0
    listed = http.call(port, "GET", "/v1/models/bert").json()
    assert listed["label_graph"] == "int8"


def test_label_and_attention_calls_at_once_never_share_a_batch(
    server: RunningServer, target: str, expected: dict[int, np.ndarray]
) -> None:
    batches = {
        graph: server.value("attnserve_graph_batches_total", model="bert", graph=graph) for graph in GRAPHS
    }
    calls: list[tuple[int, pb.AttentionMode]] = [
        (index % len(TEXTS), NONE if index % 2 else POOLED) for index in range(48)
    ]
    with ThreadPoolExecutor(12) as pool:
        replies = list(pool.map(lambda call: _classify(target, *call), calls))
    apart = distinct(expected)
    for (index, mode), logits in zip(calls, replies, strict=True):
        if mode == POOLED:
            np.testing.assert_allclose(logits, expected[POOLED][index], atol=2e-5)
        elif apart[index]:
            # int8 quantizes activations with one scale per batch, so a label row's logits move
            # with its batch mates; what they never are is the float32 graph's.
            assert np.abs(logits - expected[POOLED][index]).max() > 2e-5
    # Both graphs ran batches of these calls, and no more batches than calls of their kind.
    for graph, mode in zip(GRAPHS, (POOLED, NONE), strict=True):
        ran = server.value("attnserve_graph_batches_total", model="bert", graph=graph) - batches[graph]
        assert 1 <= ran <= sum(1 for _, asked in calls if asked == mode)
